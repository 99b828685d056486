package webui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/webui"
)

// importRE matches an ES module's static imports: import { … } from './x.js';
var importRE = regexp.MustCompile(`(?m)^import [^;]*? from '\./([\w-]+\.js)';`)

// The UI is ES modules loaded by the browser without a build step: each
// module the page's entry imports, directly or not, is served as JavaScript
// (a browser refuses a module with another MIME type).
func TestModulesAreServedAsJavaScript(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(webui.Handler(webui.Config{}))
	defer srv.Close()
	get := func(path string) (string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return resp.Header.Get("Content-Type"), string(body)
	}
	_, page := get("/")
	if !strings.Contains(page, `<script type="module" src="/assets/app.js">`) {
		t.Fatal("the page does not load /assets/app.js as a module")
	}
	seen := map[string]bool{}
	todo := []string{"app.js"}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		ctype, body := get("/assets/" + name)
		if !strings.HasPrefix(ctype, "text/javascript") {
			t.Fatalf("/assets/%s: Content-Type %q, want text/javascript", name, ctype)
		}
		for _, m := range importRE.FindAllStringSubmatch(body, -1) {
			todo = append(todo, m[1])
		}
	}
	for _, want := range []string{"dom.js", "format.js", "api.js", "live.js", "widgets.js", "router.js", "list.js", "timeline.js", "run.js"} {
		if !seen[want] {
			t.Errorf("%s is not imported from app.js", want)
		}
	}
}
