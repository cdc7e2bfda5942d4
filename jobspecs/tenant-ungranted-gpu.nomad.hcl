# A task granted one GPU allocates its memory on another GPU of the node,
# one it was not given, by naming it to the workload (-gpu) in place of the
# one in CUDA_VISIBLE_DEVICES. The kernel refuses the open of that GPU (the
# driver holds the task to the GPUs it was granted); where it cannot, memory
# on a GPU the task holds no grant for is a breach, and the driver kills the
# task and names that GPU.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload -var 'gpus=GPU-a GPU-b' jobspecs/tenant-ungranted-gpu.nomad.hcl
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

variable "gpus" {
  description = "The UUIDs of the node's GPUs, separated by spaces."
  type        = string
}

job "tenant-ungranted-gpu" {
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
          other=""
          for g in $1; do
            if [ "$g" != "$CUDA_VISIBLE_DEVICES" ]; then other="$g"; fi
          done
          echo "granted $CUDA_VISIBLE_DEVICES; allocating on $other"
          exec "$0" -gpu "$other" -iterations 50 -iteration-time 200ms -persistent-mib 1024 -ephemeral-mib 512
        EOT
        , var.workload, var.gpus]
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
