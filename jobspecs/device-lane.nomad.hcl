# A job that needs "some GPU with at least 10 GiB", and is happy with a lane.
#
# caravan-device can cut a GPU into lanes: slices of its memory, each with a
# share of its compute. Every lane is an ordinary Nomad device instance, so a
# jobspec asks for one exactly as it would ask for a whole GPU. The device's
# `memory` attribute is the memory of the instance (of the lane, for a lane),
# in MiB, so a constraint in GiB compares as you would expect.
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

        device "nvidia/gpu" {
          count = 1

          # Hard requirement: at least min_memory. A lane of an 80 GiB GPU
          # cut into four (about 20 GiB) qualifies, and so would a whole
          # 16 GiB or 40 GiB GPU.
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = var.min_memory
          }

          # Preference: when both fit, take a lane and leave whole GPUs for
          # jobs that need a whole GPU. Without an affinity Nomad picks any
          # device group that fits. lanes_per_gpu is 1 for a whole GPU.
          affinity {
            attribute = "${device.attr.lanes_per_gpu}"
            operator  = ">"
            value     = "1"
            weight    = 50
          }
        }
      }
    }
  }
}
