# A task under MPS raises its own pinned memory limit before CUDA starts,
# then goes past its 2 GiB budget. Its MPS server's limit, which the driver
# set before the task ran, still refuses the allocation: the task fails on
# CUDA's out-of-memory error. The watchdog only warns here, so that a limit
# the task could raise would let it complete.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/tenant-mps-raised-limit.nomad.hcl
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "tenant-mps-raised-limit" {
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
        args = ["-c", <<-EOT
          echo "limit given: $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
          export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1000000M
          exec "$0" -iterations 10 -iteration-time 100ms -steps 1 -persistent-mib 1024 -ephemeral-mib 512 -mode exceed -after 3
        EOT
        , var.workload]

        gpu_memory        = "2GiB"
        gpu_memory_policy = "warn"
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
