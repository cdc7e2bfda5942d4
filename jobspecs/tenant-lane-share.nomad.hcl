# Two tasks share one lane of two slots and fit it by what they declare
# (4 GiB persistent + 2 GiB ephemeral each, 12 GiB of a 15 GiB lane), so
# they run concurrently and each is held to its share of the lane, 7.5 GiB.
# "grower" then takes 10 GiB in its iterations: within the lane, past its
# share, into what "neighbour" was admitted with. The driver ends grower
# for it; neighbour completes.
#
#   nomad job run -var workload=$PWD/bin/caravan-workload jobspecs/tenant-lane-share.nomad.hcl
#   nomad alloc status <grower's alloc>   # "... (its share of lane 0's 15360 MiB while the lane's tasks run concurrently)"
variable "workload" {
  description = "Path of the caravan-workload binary on the client."
  type        = string
  default     = "caravan-workload"
}

job "tenant-lane-share" {
  type = "batch"

  group "neighbour" {
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
        args = ["-iterations", "30", "-iteration-time", "200ms",
        "-persistent-mib", "4096", "-ephemeral-mib", "2048"]
        memory_profile {
          persistent = "4GiB"
          ephemeral  = "2GiB"
        }
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

  group "grower" {
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
        args = ["-iterations", "60", "-iteration-time", "200ms",
        "-persistent-mib", "4096", "-ephemeral-mib", "6144"]
        memory_profile {
          persistent = "4GiB"
          ephemeral  = "2GiB"
        }
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
