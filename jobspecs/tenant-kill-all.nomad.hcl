# A hostile task signals every process its user may signal (kill -9 -1)
# and exits 0. Beside it, tenant-neighbour must survive: tasks of different
# allocations must not share a UID.
#
#   nomad job run jobspecs/tenant-kill-all.nomad.hcl
job "tenant-kill-all" {
  type = "batch"

  group "attack" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "kill" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        # kill(-1, ...) spares the caller itself; its status says little
        # (0 even when every process refused), so it is only reported.
        args = ["-c", <<-EOT
          echo "killer uid=$(id -u)"
          kill -9 -1
          echo "kill -9 -1 done (status $?)"
          exit 0
        EOT
        ]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
