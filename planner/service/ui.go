package service

import (
	"bytes"
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/caravan-gpu/caravan/planner/plot"
	"github.com/caravan-gpu/caravan/planner/simout"
	gplot "gonum.org/v1/plot"
)

// The dashboard's page, script and style, served from the binary: the
// machines it runs on are offline.
//
//go:embed ui
var uiFiles embed.FS

// resultsDepth is how deep under ui.results_dir output folders are found.
const resultsDepth = 3

// uiRoutes adds the dashboard and the read-only JSON it polls to mux.
func (p *Planner) uiRoutes(mux *http.ServeMux) {
	static, _ := fs.Sub(uiFiles, "ui")
	files := http.StripPrefix("/ui/", http.FileServerFS(static))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /v1/gpus", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, p.GPUs(r.Context()))
	})
	mux.HandleFunc("GET /v1/decisions", func(w http.ResponseWriter, r *http.Request) {
		limit := 0
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				http.Error(w, "decisions: limit must be a positive number", http.StatusBadRequest)
				return
			}
			limit = n
		}
		writeJSON(w, http.StatusOK, p.Decisions(limit))
	})
	mux.HandleFunc("GET /v1/results", func(w http.ResponseWriter, r *http.Request) {
		res := p.Results(time.Now())
		res.Folders = []string{}
		if fsys, done, ok := p.resultsFS(); ok {
			if dirs, err := simout.List(fsys, resultsDepth); err == nil {
				res.Folders = dirs
			}
			done()
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /ui/plots/{name}", func(w http.ResponseWriter, r *http.Request) {
		var runs []plot.Run
		var panels func([]plot.Run) ([]*gplot.Plot, error)
		switch r.PathValue("name") {
		case "jct.svg":
			runs, panels = []plot.Run{p.liveRun(time.Now())}, one(plot.JCTPanel)
		case "util.svg":
			runs, panels = []plot.Run{p.liveRun(time.Now())}, one(plot.UtilPanel)
		case "results.svg":
			folder := r.URL.Query().Get("folder")
			fsys, done, ok := p.resultsFS()
			if ok {
				defer done()
			}
			switch {
			case !ok:
				http.Error(w, "results: no ui.results_dir is configured", http.StatusNotFound)
				return
			case !fs.ValidPath(folder) || !simout.IsOutput(fsys, folder):
				http.Error(w, "results: folder must name a caravan sim or replay output folder under ui.results_dir", http.StatusNotFound)
				return
			}
			var err error
			if runs, err = simout.Read(fsys, folder); err != nil {
				http.Error(w, "results: "+err.Error(), http.StatusUnprocessableEntity)
				return
			}
			panels = both
		default:
			http.NotFound(w, r)
			return
		}
		ps, err := panels(runs)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		height := plot.PanelHeight
		if len(ps) > 1 {
			height = plot.BothHeight
		}
		var buf bytes.Buffer
		if err := plot.WriteSVG(&buf, plot.Width, height, ps...); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
}

func one(panel func([]plot.Run) (*gplot.Plot, error)) func([]plot.Run) ([]*gplot.Plot, error) {
	return func(runs []plot.Run) ([]*gplot.Plot, error) {
		p, err := panel(runs)
		return []*gplot.Plot{p}, err
	}
}

func both(runs []plot.Run) ([]*gplot.Plot, error) {
	jct, err := plot.JCTPanel(runs)
	if err != nil {
		return nil, err
	}
	util, err := plot.UtilPanel(runs)
	return []*gplot.Plot{jct, util}, err
}

// resultsFS is ui.results_dir, opened so that no path read through it
// leaves it, not even through a symbolic link; done closes it.
func (p *Planner) resultsFS() (fsys fs.FS, done func(), ok bool) {
	if p.cfg.UIResultsDir == "" {
		return nil, nil, false
	}
	root, err := os.OpenRoot(p.cfg.UIResultsDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("cannot open ui.results_dir", "path", p.cfg.UIResultsDir, "error", err)
		}
		return nil, nil, false
	}
	return root.FS(), func() { _ = root.Close() }, true
}
