# A training job that goes over its GPU memory budget on purpose. The caravan
# driver's watchdog sees the task's processes hold more GPU memory than the
# budget and kills the task; `nomad alloc status` shows which process used
# how much of what budget.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-over-budget.nomad.hcl
#   nomad alloc status <alloc-id>
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "driver-over-budget" {
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
        # 1 GiB of weights, 512 MiB of activations per iteration; from the
        # third iteration on it grabs 25% more than its budget.
        args = ["-iterations", "100", "-iteration-time", "200ms",
          "-persistent-mib", "1024", "-ephemeral-mib", "512",
        "-mode", "exceed", "-after", "3"]

        # Lower the budget below what the granted GPU has. gpu_memory may only
        # lower a granted budget, never raise it.
        gpu_memory = "2GiB"
        # "kill" (the default) ends the task on a breach; "warn" only reports.
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
