package service

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caravan-gpu/caravan/planner/cluster"
	"github.com/caravan-gpu/caravan/planner/plannerapi"

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
		query, err := parseQueueQuery(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, "queue: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, p.QueuePage(query))
	})
	mux.HandleFunc("GET /v1/explain/{job...}", func(w http.ResponseWriter, r *http.Request) {
		job, err := url.PathUnescape(r.PathValue("job"))
		if err != nil || job == "" {
			http.Error(w, "explain: want /v1/explain/<job> or /v1/explain/<namespace>/<job>", http.StatusBadRequest)
			return
		}
		e, ok := p.Explain(job)
		if !ok {
			http.Error(w, "job "+job+" is not in the planner's last round: it is not managed (no caravan.policy meta, no managed namespace, or no GPU request), or it was registered since that round", http.StatusNotFound)
			return
		}
		e.Group = p.jobGroup(cluster.Key(e.Namespace, e.Job))
		writeJSON(w, http.StatusOK, e)
	})
	mux.Handle("GET /v1/metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	// The dashboard reads what the API serves, and only reads.
	p.uiRoutes(mux)
	if p.cfg.APIToken == "" {
		return mux
	}
	return requireToken(mux, p.cfg.APIToken)
}

// openRoutes answer without the API token: Consul's health check sends
// none, and the dashboard's page, script and style hold no data (the
// browser cannot send a header when it first loads the page).
var openRoutes = map[string]bool{"GET /v1/health": true, "GET /ui": true, "GET /ui/": true}

// requireToken lets a request through to mux only with token, unless the
// route it matches is open. Both sides are hashed before the constant-time
// comparison, so that not even the token's length leaks.
func requireToken(mux *http.ServeMux, token string) http.Handler {
	want := sha256.Sum256([]byte(token))
	const how = `send "Authorization: Bearer <token>" or "` + plannerapi.TokenHeader + `: <token>" with the planner's http.token`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); openRoutes[pattern] {
			mux.ServeHTTP(w, r)
			return
		}
		got, sent := requestToken(r)
		if !sent {
			w.Header().Set("WWW-Authenticate", `Bearer realm="caravan-planner"`)
			writeError(w, http.StatusUnauthorized, "this planner requires an API token: "+how)
			return
		}
		if sum := sha256.Sum256([]byte(got)); subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			writeError(w, http.StatusForbidden, "the API token is wrong: "+how)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// requestToken is the X-Caravan-Token header, else the bearer token of the
// Authorization header; sent is false when neither holds one.
func requestToken(r *http.Request) (token string, sent bool) {
	if t := r.Header.Get(plannerapi.TokenHeader); t != "" {
		return t, true
	}
	scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	t = strings.TrimSpace(t)
	return t, t != ""
}

// queuePageMax is the most jobs one page of GET /v1/queue holds.
const queuePageMax = 1000

// parseQueueQuery reads GET /v1/queue's optional offset, limit and filter;
// an error names the parameter that is wrong.
func parseQueueQuery(v url.Values) (QueueQuery, error) {
	var q QueueQuery
	count := func(name string, lo, hi int, want string) (int, error) {
		s := v.Get(name)
		if s == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("%s must be %s, got %q", name, want, s)
		}
		return n, nil
	}
	var err error
	if q.Offset, err = count("offset", 0, math.MaxInt, "a whole number, 0 or more"); err != nil {
		return q, err
	}
	if q.Limit, err = count("limit", 1, queuePageMax, fmt.Sprintf("a whole number from 1 to %d", queuePageMax)); err != nil {
		return q, err
	}
	q.Filter = strings.TrimSpace(v.Get("filter"))
	return q, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers {"error": msg}, with <, > and & as they are: the
// message is read by people with curl, not pasted into HTML.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(plannerapi.Error{Error: msg})
}
