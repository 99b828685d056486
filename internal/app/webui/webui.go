// Package webui is the web UI parent-worker serves at /: a runs list with
// live progress, a per-run timeline rebuilt by replaying the run's
// events, and the inbox of asks at /asks (answered in place). Plain HTML, CSS and JavaScript embedded with go:embed: no build
// step.
//
// The list page carries the first page of runs in the HTML itself, so a
// first visit shows the runs that exist on first paint, before any script
// fetched anything or the live stream opened; the script then follows the
// list live and refetches it whenever its live stream (re)opens.
package webui

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
)

//go:embed static
var static embed.FS

// snapshotMarker is where index.html takes the embedded first page of runs.
const snapshotMarker = "<!-- runs-snapshot -->"

// Config holds what the UI needs from the server. The zero value serves the
// page without an embedded list (the script fetches it).
type Config struct {
	// Runs returns the first page of the runs list selected by the page's
	// query (?status=&agentType=&parent=), as GET /v1/runs answers it. It is
	// embedded in the page at / so the list shows on first paint. An error
	// leaves the page to fetch the list itself.
	Runs func(r *http.Request) (any, error)
	// Logger reports a snapshot that could not be embedded; nil discards.
	Logger *slog.Logger
}

// Handler serves the UI: the page at / and /runs/{id} (the page routes on
// the client), its assets under /assets/.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic("webui: " + err.Error()) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		panic("webui: " + err.Error())
	}
	head, tail, ok := bytes.Cut(index, []byte(snapshotMarker))
	if !ok {
		panic("webui: index.html has no " + snapshotMarker)
	}
	write := func(w http.ResponseWriter, snapshot []byte) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(head)
		if snapshot != nil {
			// json.Marshal escapes <, > and &: the data cannot close the
			// script element.
			_, _ = w.Write([]byte(`<script id="runs-snapshot" type="application/json">`))
			_, _ = w.Write(snapshot)
			_, _ = w.Write([]byte(`</script>`))
		}
		_, _ = w.Write(tail)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		write(w, snapshot(r, cfg))
	})
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) { write(w, nil) })
	mux.HandleFunc("GET /asks", func(w http.ResponseWriter, r *http.Request) { write(w, nil) }) // the inbox (asks.js)
	mux.HandleFunc("GET /limits", func(w http.ResponseWriter, r *http.Request) { write(w, nil) })
	files := http.StripPrefix("/assets/", http.FileServerFS(assets))
	mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, r *http.Request) {
		// The embedded files carry no modification time: make browsers
		// revalidate so a new binary's assets are never stale.
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	return mux
}

// snapshot returns the list page's embedded first page of runs as JSON, or
// nil for none.
func snapshot(r *http.Request, cfg Config) []byte {
	if cfg.Runs == nil {
		return nil
	}
	page, err := cfg.Runs(r)
	if err != nil {
		if r.Context().Err() == nil {
			cfg.Logger.DebugContext(r.Context(), "runs list not embedded in the page", "err", err)
		}
		return nil
	}
	raw, err := json.Marshal(page)
	if err != nil {
		cfg.Logger.WarnContext(r.Context(), "encode the runs list for the page", "err", err)
		return nil
	}
	return raw
}
