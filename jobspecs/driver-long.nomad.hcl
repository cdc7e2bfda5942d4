# A long training job with a GPU memory budget, used to show that tasks keep
# running, and stay under budget enforcement, when the Nomad client or the
# caravan driver restarts: the new driver process re-attaches to the task's
# executor and takes its budget from the state it stored at start.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-long.nomad.hcl
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "driver-long" {
  type = "batch"

  group "train" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "train" {
      driver = "caravan"

      config {
        command = var.workload
        args = ["-iterations", "100000", "-iteration-time", "200ms",
        "-persistent-mib", "2048", "-ephemeral-mib", "1024"]
        gpu_memory = "4GiB"
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
