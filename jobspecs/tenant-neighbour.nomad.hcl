# An innocent tenant that sleeps with a secret in its environment; the
# tenant-* attack jobs run beside it, in allocations of their own, and must
# neither kill it nor read its secret.
#
#   nomad job run -var secret=s3cr3t jobspecs/tenant-neighbour.nomad.hcl
variable "secret" {
  type    = string
  default = "none"
}

job "tenant-neighbour" {
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

    task "sleep" {
      driver = "caravan"

      env {
        TENANT_SECRET = var.secret
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"neighbour up as uid $(id -u)\"; exec sleep 600"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
