// Package webui is the web UI parent-worker serves at /: a runs list with
// live progress and a per-run timeline rebuilt by replaying the run's
// events. Plain HTML, CSS and JavaScript embedded with go:embed: no build
// step.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the UI: the page at / and /runs/{id} (the page routes on
// the client), its assets under /assets/.
func Handler() http.Handler {
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic("webui: " + err.Error()) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		panic("webui: " + err.Error())
	}
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /runs/{id}", page)
	files := http.StripPrefix("/assets/", http.FileServerFS(assets))
	mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, r *http.Request) {
		// The embedded files carry no modification time: make browsers
		// revalidate so a new binary's assets are never stale.
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	return mux
}
