package nomadx

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// NewClient brings its own connection pool, and still trusts the CA that
// NOMAD_CACERT names, as the api package does for a client of its own.
func TestNewClientKeepsTLSSettings(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"config": {}, "member": {}, "stats": {}}`))
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	must.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	t.Setenv("NOMAD_CACERT", ca)
	c, err := NewClient(srv.URL, "")
	must.NoError(t, err)
	_, err = c.Agent().Self()
	must.NoError(t, err)

	t.Setenv("NOMAD_CACERT", "")
	c, err = NewClient(srv.URL, "")
	must.NoError(t, err)
	_, err = c.Agent().Self()
	must.ErrorContains(t, err, "certificate")
}

// A unix:// address (the Task API socket) keeps the api package's own
// socket client.
func TestNewClientOverAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	must.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"config": {}, "member": {}, "stats": {}}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c, err := NewClient("unix://"+sock, "")
	must.NoError(t, err)
	_, err = c.Agent().Self()
	must.NoError(t, err)
}
