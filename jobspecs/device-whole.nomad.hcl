# A job that needs a whole GPU with a lot of memory.
#
# A GPU that the operator cut into lanes is offered only as lanes, never also
# whole, so Nomad can never hand out the same memory twice. An 80 GiB GPU cut
# into four lanes therefore shows up as four devices of about 20 GiB each; it
# cannot satisfy this job, which waits for a whole GPU instead.
#
#   nomad job run -var min_memory="40 GiB" jobspecs/device-whole.nomad.hcl

variable "driver" {
  type    = string
  default = "caravan"
}

variable "min_memory" {
  type    = string
  default = "40 GiB"
}

variable "seconds" {
  type    = number
  default = 3600
}

job "device-whole" {
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

    task "work" {
      driver = var.driver

      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(CUDA_VISIBLE_DEVICES|CARAVAN_DEV_)' | sort; sleep ${var.seconds}"]
      }

      resources {
        cpu    = 50
        memory = 32

        device "nvidia/gpu" {
          count = 1

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = var.min_memory
          }

          # Lanes are their own device type ("nvidia/lane"), so this asks
          # for whole GPUs (or MIG instances) only. Where the operator set
          # lanes_as_gpus = true, add a constraint on
          # ${device.attr.lanes_per_gpu} = 1 to say so outright.
        }
      }
    }
  }
}
