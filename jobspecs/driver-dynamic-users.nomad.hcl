# Two tasks that name no user, on a client whose caravan driver sets
# dynamic_users = true: the Nomad client gives each task a UID of its own
# from its pool (client { users { dynamic_user_min/max } }, 80000-89999 by
# default), so one task cannot signal the other's processes. The prober
# tries and records that the kernel refused.
#
#   nomad job run jobspecs/driver-dynamic-users.nomad.hcl
#   nomad alloc logs <alloc-id> prober
job "driver-dynamic-users" {
  type = "batch"

  group "pair" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "victim" {
      driver = "caravan"
      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "victim uid=$(id -u) user=$USER"
          echo $$ > "$NOMAD_ALLOC_DIR/victim.pid"
          while [ ! -e "$NOMAD_ALLOC_DIR/done" ]; do sleep 0.2; done
        EOT
        ]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }

    task "prober" {
      driver = "caravan"
      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "prober uid=$(id -u) user=$USER"
          while [ ! -s "$NOMAD_ALLOC_DIR/victim.pid" ]; do sleep 0.2; done
          if kill -TERM "$(cat "$NOMAD_ALLOC_DIR/victim.pid")"; then
            echo "prober could signal the victim"
            touch "$NOMAD_ALLOC_DIR/done"
            exit 1
          fi
          echo "prober was refused"
          touch "$NOMAD_ALLOC_DIR/done"
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
