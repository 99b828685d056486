package e2e_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The layers of docs/layout.md import one way: the contract (pkg/events,
// pkg/jetruntype) imports no other jetrun package, the engine imports only
// the contract and itself, and nothing under pkg/ imports an app or a test
// kit. A change that breaks the direction fails here, naming the import.
func TestImportsRunOneWay(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./pkg/...", "./internal/engine/...")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/jetrun/jetrun/"
	contract := map[string]bool{mod + "pkg/events": true, mod + "pkg/jetruntype": true}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		checked++
		for _, imp := range imports {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			var bad bool
			switch {
			case contract[pkg]:
				bad = !contract[imp]
			case strings.HasPrefix(pkg, mod+"internal/engine"):
				bad = !contract[imp] && !strings.HasPrefix(imp, mod+"internal/engine")
			default: // the roles under pkg/
				bad = strings.HasPrefix(imp, mod+"internal/app") || strings.HasPrefix(imp, mod+"internal/testkit")
			}
			if bad {
				t.Errorf("%s imports %s against the layers of docs/layout.md", strings.TrimPrefix(pkg, mod), strings.TrimPrefix(imp, mod))
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list named %d packages; the layout check saw too few to mean anything:\n%s", checked, out)
	}
}
