# A task on a lane under MPS points CUDA_MPS_PIPE_DIRECTORY at a directory
# of its own before CUDA starts, to run outside MPS and the limit of its MPS
# server. caravan-device puts lane GPUs in exclusive-process compute mode,
# where the one context is the MPS server's: the task finds no GPU.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/tenant-mps-leave.nomad.hcl
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "tenant-mps-leave" {
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
          echo "MPS pipe directory given: $CUDA_MPS_PIPE_DIRECTORY"
          export CUDA_MPS_PIPE_DIRECTORY="$NOMAD_TASK_DIR/my-mps"
          exec "$0" -iterations 10 -iteration-time 100ms -persistent-mib 1024 -ephemeral-mib 512
        EOT
        , var.workload]
      }

      resources {
        cpu    = 100
        memory = 64
        device "nvidia/lane" {
          count = 1
        }
      }
    }
  }
}
