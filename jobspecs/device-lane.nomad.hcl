# A job that needs a lane with at least 10 GiB.
#
# caravan-device can cut a GPU into lanes: slices of its memory, each with a
# share of its compute. Every lane is a Nomad device instance of the type
# "lane", so a job asks for one by name, `device "nvidia/lane"`; a plain
# `device "nvidia/gpu"` only ever gets whole GPUs (unless the operator set
# lanes_as_gpus = true in the plugin config, which offers lanes as "gpu" too).
# The device's `memory` attribute is the memory of the instance (of the lane,
# for a lane), in MiB, so a constraint in GiB compares as you would expect.
#
#   nomad job run -var min_memory="10 GiB" jobspecs/device-lane.nomad.hcl
#   nomad alloc status <alloc-id>   # "Device Stats" shows the lane's memory
#   nomad alloc logs <alloc-id>     # the environment Reserve gave the task

variable "driver" {
  description = "Task driver: caravan enforces the lane's memory budget; raw_exec just runs the command."
  type        = string
  default     = "caravan"
}

variable "min_memory" {
  description = "Smallest GPU memory the job can live with, e.g. \"10 GiB\"."
  type        = string
  default     = "10 GiB"
}

variable "seconds" {
  description = "How long the task holds its GPU."
  type        = number
  default     = 3600
}

job "device-lane" {
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
        # Reserve put the GPU's UUID in CUDA_VISIBLE_DEVICES and a
        # CARAVAN_DEV_<instance> variable describing the lane: GPU, lane,
        # slot, memory budget (memory_mib) and compute share (share, %);
        # with MPS serving the lanes, the CUDA_MPS_ client settings too.
        args = ["-c", "env | grep -E '^(CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES|CARAVAN_DEV_|CUDA_MPS_)' | sort; sleep ${var.seconds}"]
      }

      resources {
        cpu    = 50
        memory = 32

        # One lane. A count of N asks for N lanes on N distinct GPUs: a
        # reservation that would put two on one GPU is refused.
        device "nvidia/lane" {
          count = 1

          # Hard requirement: at least min_memory. A lane of an 80 GiB GPU
          # cut into four (about 20 GiB) qualifies.
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = var.min_memory
          }
        }
      }
    }
  }
}
