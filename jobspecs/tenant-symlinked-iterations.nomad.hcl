# A hostile task plants a symlink where the caravan driver, as root, creates
# the task's iteration file ($CARAVAN_ITERATION_FILE, in the task directory,
# which the task may write) at every start. Its first run replaces the file
# with a symlink to a file it cannot reach itself and fails; Nomad restarts
# it in place, and the driver must not follow the symlink (truncating and
# chowning the victim to the task's user) on that second start.
#
#   nomad job run -var victim=/etc/shadow jobspecs/tenant-symlinked-iterations.nomad.hcl
variable "victim" {
  description = "Path of a root-owned file the task must not be able to change."
  type        = string
}

job "tenant-symlinked-iterations" {
  type = "batch"

  group "attack" {
    # One quick local restart: the driver prepares the iteration file again.
    restart {
      attempts = 1
      delay    = "1s"
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "plant" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          if [ ! -e "$NOMAD_TASK_DIR/planted" ]; then
            touch "$NOMAD_TASK_DIR/planted"
            rm -f "$CARAVAN_ITERATION_FILE"
            ln -s "$0" "$CARAVAN_ITERATION_FILE"
            echo "planted $CARAVAN_ITERATION_FILE -> $(readlink "$CARAVAN_ITERATION_FILE")"
            exit 1
          fi
          echo "second run; iteration file: $(ls -l "$CARAVAN_ITERATION_FILE")"
        EOT
        , var.victim]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
