# A training job that goes past its GPU memory budget for 2 ms in its last
# iteration and exits 0 about 10 ms later, long before the watchdog's next
# sample: the breach must still be judged, and the task end failed.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/tenant-breach-then-exit.nomad.hcl
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "tenant-breach-then-exit" {
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
        # 25 iterations of 20 ms in one forward and one backward step: the
        # spike comes after about 490 ms, in the last iteration's peak, and
        # the backward step's 10 ms later the workload exits 0.
        args = ["-iterations", "25", "-iteration-time", "20ms", "-steps", "1",
          "-persistent-mib", "1024", "-ephemeral-mib", "512",
        "-mode", "exceed", "-after", "25", "-spike-time", "2ms"]

        gpu_memory        = "2GiB"
        gpu_memory_policy = "kill"
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
