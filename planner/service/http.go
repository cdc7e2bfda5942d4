package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the planner's HTTP API. Every replica serves it; only the
// leader's queue reflects applied writes.
func (p *Planner) Handler() http.Handler {
	mux := http.NewServeMux()
	// The health check behind the replica's Consul registration: it fails
	// when Nomad has not answered for nomad.unreachable_after, so that
	// Consul invalidates the session of a leader that cannot do its work
	// and another replica takes the lock.
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		ok, silent := p.nomadReachable(time.Now())
		if !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "leader": p.IsLeader(),
				"error": fmt.Sprintf("Nomad has not answered for %s (nomad.unreachable_after = %s)",
					silent.Round(time.Second), p.cfg.NomadUnreachable)})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "leader": p.IsLeader()})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, p.Status())
	})
	mux.HandleFunc("GET /v1/queue", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, p.Queue())
	})
	mux.HandleFunc("GET /v1/explain/{job...}", func(w http.ResponseWriter, r *http.Request) {
		job, err := url.PathUnescape(r.PathValue("job"))
		if err != nil || job == "" {
			http.Error(w, "explain: want /v1/explain/<job> or /v1/explain/<namespace>/<job>", http.StatusBadRequest)
			return
		}
		e, ok := p.Explain(job)
		if !ok {
			http.Error(w, "job "+job+" is not managed by the planner (no caravan.policy meta, no managed namespace, or no GPU request)", http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, e)
	})
	mux.Handle("GET /v1/metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	// The dashboard reads what the API serves, and only reads.
	p.uiRoutes(mux)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
