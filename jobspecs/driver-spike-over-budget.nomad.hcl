# A training job whose activations go past its GPU memory budget for about a
# millisecond in each iteration and are freed again, as a spike of a real
# job's activations is. No watchdog sample sees the task over budget; the
# GPU's record of the process's peak memory (NVML accounting, or the
# simulated GPU's own record) does, and the caravan driver kills the task
# with the peak in its reason.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-spike-over-budget.nomad.hcl
#   nomad alloc status <alloc-id>
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "driver-spike-over-budget" {
  type = "batch"

  group "train" {
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
        command = var.workload
        # 1 GiB of weights, 512 MiB of activations per 400 ms iteration; from
        # the second iteration on the forward pass peaks 25% past the budget
        # for 1 ms, then frees it.
        args = ["-iterations", "20", "-iteration-time", "400ms",
          "-persistent-mib", "1024", "-ephemeral-mib", "512",
        "-mode", "exceed", "-after", "2", "-spike-time", "1ms"]

        gpu_memory        = "2GiB"
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
