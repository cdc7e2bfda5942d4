# Two ways a task with two GPU processes could hold more than its budget,
# and how the caravan driver stops both.
#
# The GPU records each process's peak memory, not the task's: two processes
# that each stay within the budget could spike together past it between
# two watchdog samples. So a task says how many processes may hold memory
# on one GPU (gpu_processes, default 1), and each may hold an equal share
# of the budget; under MPS each client's pinned-memory limit is its share.
#
# - "declared": gpu_processes = 2 and a 4 GiB budget, so each of its two
#   workloads may hold 2 GiB. From the second iteration on each one's
#   forward pass peaks 25% past its share for 1 ms. Neither comes near the
#   4 GiB budget, but the two spikes together could, so the driver kills the
#   task with the peak past its share in the reason. Where MPS runs, each
#   spike fails at allocation instead, with CUDA's out-of-memory error.
# - "undeclared": the same two workloads well within the budget, without
#   gpu_processes; a second process on the GPU is stopped with a reason that
#   names both processes.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-two-processes.nomad.hcl
#   nomad alloc status <alloc-id>
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "driver-two-processes" {
  type = "batch"

  group "declared" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "train" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          pids=""
          for rank in 0 1; do
            "$0" -iterations 20 -iteration-time 400ms -persistent-mib 1024 -ephemeral-mib 512 -mode exceed -after 2 -spike-time 1ms &
            pids="$pids $!"
          done
          status=0
          for pid in $pids; do wait $pid || status=1; done
          exit $status
        EOT
        , var.workload]
        gpu_memory        = "4GiB"
        gpu_memory_policy = "kill"
        gpu_processes     = 2
      }

      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }

  group "undeclared" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "train" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          pids=""
          for rank in 0 1; do
            "$0" -iterations 50 -iteration-time 200ms -persistent-mib 512 -ephemeral-mib 256 &
            pids="$pids $!"
          done
          status=0
          for pid in $pids; do wait $pid || status=1; done
          exit $status
        EOT
        , var.workload]
        gpu_memory        = "4GiB"
        gpu_memory_policy = "kill"
      }

      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
