# A GPU training job managed by caravan's planner. The job meta
# caravan.policy opts it in. The job is submitted held: the job-level
# constraint on ${meta.caravan.planner.held} matches no node, so Nomad places
# nothing of it until the planner's policy starts it. The planner then
# removes the hold and, in the same write, sets its GPU model, lane and
# CPU/memory; it preempts the job by writing the hold back, which stops
# every allocation at once. Submitted with -var held=false, the job may
# start before the planner's first round sees it.
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

variable "count" {
  description = "allocations of one GPU each; the planner starts and stops them together"
  default     = 1
}

variable "duration" {
  description = "expected run time (\"120s\"), which srtf, srsf, hare and matching read; empty: unknown"
  default     = ""
}

variable "group" {
  description = "the team or user the job belongs to, whose finished jobs the predict policy learns sizes from; empty: the namespace"
  default     = ""
}

variable "held" {
  description = "submit held, so that the job starts only when the planner's policy starts it"
  type        = bool
  default     = true
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
    "caravan.policy"   = "default" # the policy the planner runs
    "caravan.profile"  = var.profile
    "caravan.duration" = var.duration
    "caravan.group"    = var.group
  }

  dynamic "constraint" {
    for_each = var.held ? [1] : []
    content {
      attribute = "${meta.caravan.planner.held}"
      operator  = "is_set"
    }
  }

  group "train" {
    count = var.count

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
