# A task with two device blocks. Nomad reserves each block on its own, so
# the two can land on one GPU (here: the two slots of the one lane of the
# only GPU). A process cannot keep two budgets or two lanes' turns apart on
# one GPU, so the caravan driver refuses the task, naming the instances.
# Ask for `count = 2` in one block instead: caravan-device gives a block's
# instances distinct GPUs.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-two-blocks-one-gpu.nomad.hcl
#   nomad alloc status <alloc-id>     # "Driver Failure ... are all on GPU ..."
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "driver-two-blocks-one-gpu" {
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
        args    = ["-iterations", "3", "-iteration-time", "100ms"]
      }

      resources {
        cpu    = 100
        memory = 64
        device "nvidia/lane" {
          count = 1
        }
        device "nvidia/lane" {
          count = 1
        }
      }
    }
  }
}
