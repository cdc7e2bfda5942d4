# A hostile task reads every /proc/<pid>/environ it can and prints any
# TENANT_SECRET it finds there. Beside it, tenant-neighbour holds one in its
# environment: tasks of different allocations must not share a UID, which
# would let one read the other's environment.
#
#   nomad job run jobspecs/tenant-environ-scan.nomad.hcl
job "tenant-environ-scan" {
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

    task "scan" {
      driver = "caravan"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "scanner uid=$(id -u)"
          readable=0
          for f in /proc/[0-9]*/environ; do
            env="$(tr '\000' '\n' < "$f" 2>/dev/null)" || continue
            readable=$((readable + 1))
            secret="$(printf '%s\n' "$env" | sed -n 's/^TENANT_SECRET=//p')"
            if [ -n "$secret" ]; then echo "found in $f: TENANT_SECRET=$secret"; fi
          done
          echo "scan done: $readable environ files readable"
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
