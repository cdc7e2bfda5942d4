# A job that runs on any GPU but prefers one model.
#
# Device affinities score the device groups that satisfy the constraints;
# Nomad takes the best-scoring group that still has a free instance, and falls
# back to others when the preferred model is full. Use a constraint instead of
# an affinity when the job cannot run anywhere else.
#
# Attributes you can match on include model, memory (of the instance),
# gpu_memory (of the whole GPU), compute_capability, architecture, sm_count,
# mig, lanes_per_gpu, lane_share and slots; see docs/device.md.
#
#   nomad job run -var model="Tesla T4" jobspecs/device-affinity.nomad.hcl

variable "driver" {
  type    = string
  default = "caravan"
}

variable "model" {
  description = "The GPU model to prefer, as in the device's model attribute."
  type        = string
  default     = "NVIDIA A100-SXM4-40GB"
}

variable "seconds" {
  type    = number
  default = 3600
}

job "device-affinity" {
  type = "batch"

  group "infer" {
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

          affinity {
            attribute = "${device.attr.model}"
            operator  = "="
            value     = var.model
            weight    = 100
          }
        }
      }
    }
  }
}
