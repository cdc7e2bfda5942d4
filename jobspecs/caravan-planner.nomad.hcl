# caravan's planner as a Nomad job: replicas of `caravan planner run` under
# raw_exec. Each replica registers itself in Consul as service
# "caravan-planner" with an HTTP health check on /v1/health, and they elect
# a leader through a Consul lock; only the leader writes to Nomad.
#
#   nomad job run -var caravan=/usr/local/bin/caravan jobspecs/caravan-planner.nomad.hcl
#   caravan queue -address HOST:PORT   # HOST:PORT from `consul catalog services` / the caravan-planner service
#
# The planner finds Nomad through Consul's "nomad" service unless
# nomad_addr is set. With ACLs on, give the task a token through
# NOMAD_TOKEN and CONSUL_HTTP_TOKEN (for example from Nomad Variables with a
# template), with the least-privilege policy in docs/planner.md. To ask an
# API token of the planner's readers, give it CARAVAN_PLANNER_TOKEN the same
# way; the health check needs none.
variable "caravan" {
  description = "path of the caravan binary on the client nodes"
  default     = "/usr/local/bin/caravan"
}

variable "replicas" {
  description = "planner replicas; one leads, the others serve the read API and take over within 15 s"
  default     = 2
}

variable "policy" {
  default = "las+match"
}

variable "nomad_addr" {
  description = "Nomad's HTTP address; empty: found through Consul's nomad service"
  default     = ""
}

variable "consul_addr" {
  description = "Consul's HTTP address as seen from the client nodes"
  default     = "127.0.0.1:8500"
}

job "caravan-planner" {
  type = "service"
  # The planner must keep running when GPU jobs crowd the cluster.
  priority = 90

  group "planner" {
    count = var.replicas

    # Replicas on different nodes, so that losing a node leaves a follower.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "http" {}
    }

    restart {
      attempts = 10
      interval = "5m"
      delay    = "5s"
      mode     = "delay"
    }

    task "planner" {
      driver = "raw_exec"

      config {
        command = var.caravan
        args    = ["planner", "run", "-config", "${NOMAD_TASK_DIR}/planner.hcl"]
      }

      env {
        CONSUL_HTTP_ADDR = var.consul_addr
      }

      template {
        destination = "${NOMAD_TASK_DIR}/planner.hcl"
        change_mode = "restart"
        data        = <<-EOT
          id = "{{ env "NOMAD_ALLOC_ID" }}"
          http {
            address   = "0.0.0.0:{{ env "NOMAD_PORT_http" }}"
            advertise = "{{ env "NOMAD_ADDR_http" }}"
          }
          nomad {
            address = "${var.nomad_addr}"
          }
          consul {
            enabled = true
          }
          planning {
            policy = "${var.policy}"
          }
        EOT
      }

      resources {
        cpu    = 200
        memory = 128
      }

      # Stop takes the Consul lock's session down with the process, so the
      # next leader takes over at once.
      kill_signal  = "SIGTERM"
      kill_timeout = "15s"
    }
  }
}
