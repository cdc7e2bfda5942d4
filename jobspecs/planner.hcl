# Example configuration of `caravan planner run -config jobspecs/planner.hcl`.
# Every setting is optional; the values below are the defaults unless noted.
# docs/planner.md is the full reference.

log_level = "info"

http {
  # The HTTP API: /v1/status, /v1/queue, /v1/explain/<job>, /v1/gpus,
  # /v1/decisions, /v1/results, /v1/metrics, and the dashboard at /ui/.
  address = "127.0.0.1:4680"
  # An API token every route but /v1/health and the dashboard's page asks
  # for, as "Authorization: Bearer <token>" or "X-Caravan-Token: <token>".
  # Empty: $CARAVAN_PLANNER_TOKEN, and when that is empty too, none.
  token = ""
}

ui {
  # A folder of `caravan sim -out` and `caravan replay -out` folders that
  # the dashboard's Results view may draw; empty: none. Nothing outside it
  # is read.
  results_dir = ""
}

nomad {
  # Empty: $NOMAD_ADDR, else Consul's "nomad" service. The token comes from
  # $NOMAD_TOKEN when empty; TLS from the NOMAD_CACERT/NOMAD_CLIENT_* env.
  address = ""
  # The health check fails when Nomad has not answered for this long, so a
  # leader that cannot reach Nomad gives up the lock.
  unreachable_after = "30s"
}

consul {
  # Registration, the leader lock and KV. Set enabled = false to run a
  # single planner without Consul.
  enabled        = true
  check_interval = "1s"
}

planning {
  # An ordering policy with optional placement and sizing steps, as
  # `caravan sim` takes them: las, gittins, fifo, las+match, las+pack,
  # gittins+match+synergy, ...
  policy = "las+match"

  # Every job in these namespaces is managed; elsewhere jobs opt in with
  # job meta caravan.policy.
  namespaces = []

  # 2D-LAS/2D-Gittins queue cuts in GPU-seconds (default 3250, 7200).
  # The demo uses short cuts so that demotions happen within a minute.
  queue_cuts   = [30, 120]
  promote_knob = 0

  interval     = "10s"
  min_interval = "1s"
  # Off by default: wait for Nomad to go quiet this long (at most
  # min_interval), so that a burst of submissions is planned together.
  settle       = "0s"

  # Synergy's sizing (a +synergy step): the MHz one profiled core is worth
  # (default: each node's own) and the lease after which running jobs are
  # placed and sized again, a restart where that changes (default: none).
  # core_mhz      = 2500
  # synergy_lease = "5m"

  # Each write is a job register: one Raft entry and one evaluation.
  max_writes_per_second = 250
  write_burst           = 100
  write_workers         = 16
}
