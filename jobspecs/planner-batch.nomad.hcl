# A GPU training job managed by caravan's planner. The job meta
# caravan.policy opts it in; the planner then sets its priority (in bands 10
# apart, so Nomad's preemption enforces the queue) and, while it has no
# allocation, its GPU model, lane and CPU/memory.
#
#   nomad job run -var name=train-1 -var iterations=600 jobspecs/planner-batch.nomad.hcl
#   caravan queue
#   caravan explain train-1
variable "workload" {
  description = "path of the caravan-workload binary"
  default     = "caravan-workload"
}

variable "name" {
  default = "train"
}

variable "iterations" {
  description = "training iterations of 200 ms each"
  default     = 50
}

variable "profile" {
  description = "the throughput profile (caravan profile show) the planner matches GPU models with"
  default     = ""
}

variable "model" {
  description = "GPU model to run on, as the user's own choice (the planner keeps it); empty: the planner may choose"
  default     = ""
}

job "train" {
  id   = var.name
  name = var.name
  type = "batch"

  meta = {
    "caravan.policy"  = "default" # the policy the planner runs
    "caravan.profile" = var.profile
  }

  group "train" {
    # Preempted allocations come back through rescheduling; a failed run
    # should not retry for minutes.
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts       = 5
      interval       = "1h"
      delay          = "5s"
      delay_function = "constant"
      unlimited      = false
    }

    task "train" {
      driver = "caravan"

      config {
        command = var.workload
        args    = ["-iterations", "${var.iterations}", "-iteration-time", "200ms", "-persistent-mib", "256", "-ephemeral-mib", "64"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 1

          dynamic "constraint" {
            for_each = var.model == "" ? [] : [var.model]
            content {
              attribute = "${device.attr.model}"
              value     = constraint.value
            }
          }
        }
      }
    }
  }
}
