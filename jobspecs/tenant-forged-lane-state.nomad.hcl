# A hostile lane task forges the lane state the caravan driver keeps for it
# (caravan-lane-state.json in the task directory, which the task may write)
# and keeps rewriting it, so that a new driver process after a client
# restart reads the forgery: a tiny measured memory profile, which would let
# it run concurrently beside a neighbour it should take turns with, a mode,
# and a turn that started in the future, which would never end. The driver
# must not believe any of it.
#
#   nomad job run jobspecs/tenant-forged-lane-state.nomad.hcl
job "tenant-forged-lane-state" {
  type = "batch"

  group "forger" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "forge" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        # No memory_profile: a declared one would outrank the state's.
        args = ["-c", <<-EOT
          dir="$NOMAD_TASK_DIR/.."
          forged='{"'"$CARAVAN_LANE"'":{"profile":{"PersistentMiB":4242,"EphemeralMiB":17,"Known":true,"Measured":true},"suspended":false,"turn":true,"slice_start":"2100-01-01T00:00:00Z","mode":"concurrent","switches":0}}'
          echo "forging the lane state of $CARAVAN_LANE"
          while :; do
            printf '%s' "$forged" > "$dir/.forged-lane-state"
            mv -f "$dir/.forged-lane-state" "$dir/caravan-lane-state.json"
            sleep 0.2
          done
        EOT
        ]
      }

      resources {
        cpu    = 50
        memory = 32
        device "nvidia/lane" {
          count = 1
        }
      }
    }
  }
}
