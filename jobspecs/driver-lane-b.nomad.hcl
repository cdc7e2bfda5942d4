# One of two training jobs (driver-lane-a and driver-lane-b) that share one
# lane of a GPU. Each declares its memory profile: 9 GiB persistent (weights,
# optimizer state) and 2 GiB ephemeral (activations). Two of them need
# 2 x 9 + 2 = 20 GiB, more than a 15 GiB lane, so the caravan driver runs
# them in turns: one runs while the other is suspended, switching every
# time_slice_quantum, at an iteration boundary when the job marks them
# (caravan-workload appends a line to $CARAVAN_ITERATION_FILE per iteration).
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-lane-a.nomad.hcl
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/driver-lane-b.nomad.hcl
#   nomad alloc status <alloc-id>     # "suspended in ... via freeze (cgroup-v2) in 1.2ms" events
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

variable "iterations" {
  type    = number
  default = 30
}

job "driver-lane-b" {
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
        args = ["-iterations", "${var.iterations}", "-iteration-time", "200ms",
          "-persistent-mib", "9216", "-ephemeral-mib", "2048",
        "-progress-file", "${NOMAD_TASK_DIR}/progress.json"]

        # Declared Salus profile; leave it out to have the driver measure it
        # over the first iterations (measure_iterations in the plugin config).
        memory_profile {
          persistent = "9GiB"
          ephemeral  = "2GiB"
        }
      }

      resources {
        cpu    = 100
        memory = 64
        # One slot of a lane; the device plugin's partition rule decides
        # how many slots share a lane.
        device "nvidia/lane" {
          count = 1
        }
      }
    }
  }
}
