package e2e_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The layers of docs/layout.md import one way: the contract (pkg/events,
// pkg/jetruntype) imports no other jetrun package, the engine imports only
// the contract and itself, nothing under pkg/ imports an app or a test
// kit, a role imports another role only where roleImports says why, and
// the apps reach the engine through the public faces where one exists
// (appFaces). A change that breaks the direction fails here, naming the
// import.
func TestImportsRunOneWay(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		"./pkg/...", "./internal/engine/...", "./internal/app/...", "./cmd/...")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/jetrun/jetrun/"
	contract := map[string]bool{"pkg/events": true, "pkg/jetruntype": true}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		checked++
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			imp = strings.TrimPrefix(imp, mod)
			var bad bool
			switch {
			case strings.HasPrefix(pkg, "internal/app") || strings.HasPrefix(pkg, "cmd/"):
				_, listed := appExceptions[[2]string{pkg, imp}]
				if face, ok := appFaces[imp]; ok && !listed {
					t.Errorf("%s imports %s; apps use %s (or list the import in appExceptions, with the reason)", pkg, imp, face)
				}
			case contract[pkg]:
				bad = !contract[imp]
			case strings.HasPrefix(pkg, "internal/engine"):
				bad = !contract[imp] && !strings.HasPrefix(imp, "internal/engine")
			default: // the roles under pkg/
				bad = strings.HasPrefix(imp, "internal/app") || strings.HasPrefix(imp, "internal/testkit") ||
					strings.HasPrefix(imp, "pkg/") && !contract[imp] && !roleImport(pkg, imp)
			}
			if bad {
				t.Errorf("%s imports %s against the layers of docs/layout.md", pkg, imp)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list named %d packages; the layout check saw too few to mean anything:\n%s", checked, out)
	}
}

// roleImports are the imports between roles (the packages under pkg/ but
// the contract), each with its reason; any other one fails
// TestImportsRunOneWay. Every role may import pkg/jetrun, the runtime they
// share.
var roleImports = map[[2]string]string{
	{"pkg/parent", "pkg/kv"}:                "Inspect and List read rows through the read-only face",
	{"pkg/worker", "pkg/parent"}:            "a handler's nested runs and calls are dispatched and awaited through the parent API",
	{"pkg/worker/workertest", "pkg/worker"}: "the test kit serves worker handlers",
}

// roleImport reports whether role pkg may import role imp.
func roleImport(pkg, imp string) bool {
	if imp == "pkg/jetrun" || strings.HasPrefix(imp, "pkg/worker/internal/") && strings.HasPrefix(pkg, "pkg/worker") {
		return true
	}
	_, ok := roleImports[[2]string{pkg, imp}]
	return ok
}

// appFaces are the engine packages a public face stands for: an app (the
// binaries' packages) reads rows through pkg/kv and runs the reconciler
// through pkg/reconcile, not through the engine beneath them.
var appFaces = map[string]string{
	"internal/engine/runstore":  "pkg/kv",
	"internal/engine/reconcile": "pkg/reconcile",
}

// appExceptions are the apps that import an engine package of appFaces on
// purpose, each with its reason. None does. One read goes around the face
// without importing it: runview reads the runs bucket's last revision (for
// Sync: a client lists what it just wrote) through the engine's runtime,
// as pkg/kv does not offer it.
var appExceptions = map[[2]string]string{}
