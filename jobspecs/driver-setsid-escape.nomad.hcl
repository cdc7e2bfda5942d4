# A training job whose GPU work runs in a process that leaves the task's
# process tree: the task's shell starts caravan-workload with setsid from a
# child that exits at once, so the workload has a new session and process
# group and is re-parented away from the task. The caravan driver finds the
# task's processes through the task's cgroup rather than its process tree,
# so the escaped workload still counts against the budget and the kill on a
# breach takes it too. `nomad alloc status` names the escaped process.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-setsid-escape.nomad.hcl
#   nomad alloc status <alloc-id>
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "driver-setsid-escape" {
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
        command = "/bin/sh"
        # The workload goes 25% over its budget from its third iteration;
        # the shell itself holds no GPU memory and only waits.
        args = ["-c", <<-EOT
          sh -c 'setsid "$0" -iterations 300 -iteration-time 200ms -persistent-mib 1024 -ephemeral-mib 512 -mode exceed -after 3 >"$NOMAD_TASK_DIR/escaped.out" 2>&1 &' '${var.workload}'
          exec sleep 600
        EOT
        ]
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
