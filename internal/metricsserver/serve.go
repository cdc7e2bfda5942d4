// Package metricsserver serves a Prometheus registry on /metrics. The driver
// and the device plugin each keep their own registry and share this server.
package metricsserver

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve exposes reg on addr at /metrics until the returned server is closed.
func Serve(reg *prometheus.Registry, addr string) (*http.Server, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener is gone; nothing to report to
		}
	}()
	return srv, ln.Addr(), nil
}
