package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
)

// debianWheels is where Debian's python3-wheel-whl puts its wheel (make
// deps installs it): with the machine's setuptools, pip's build
// dependencies for sdk/python, found without an index.
const debianWheels = "/usr/share/python-wheels"

// pipRun runs a command of the throwaway venv with no PYTHONPATH and none
// of the machine's pip settings, and fails with its output.
func pipRun(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONDONTWRITEBYTECODE=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// `pip install ./sdk/python` works with no network: pip builds the package
// from its pyproject.toml (setuptools, the machine's, and wheel, Debian's
// wheel file, stand in for what pip would fetch from an index) into a
// fresh venv. The installed copy, not sdk/python, is what the venv imports
// (typed: py.typed is installed), and it serves the README's ten-line
// child under a real child-worker: its step is stored, it waits for the
// approval, and the run completes with its result.
func TestPythonSDKInstallsWithPip(t *testing.T) {
	t.Parallel()
	if m, _ := filepath.Glob(filepath.Join(debianWheels, "wheel-*.whl")); len(m) == 0 {
		t.Fatalf("no wheel-*.whl in %s (make deps installs python3-wheel-whl)", debianWheels)
	}
	tmp := t.TempDir()
	venv := filepath.Join(tmp, "venv")
	pipRun(t, tmp, python3(t), "-m", "venv", "--system-site-packages", venv)
	py := filepath.Join(venv, "bin", "python")
	pipRun(t, tmp, py, "-m", "pip", "install", "--no-index", "--find-links", debianWheels, "wheel")
	pipRun(t, tmp, py, "-m", "pip", "install", "--no-build-isolation", "--no-index", sdkCopy(t, tmp))

	where := pipRun(t, tmp, py, "-c", "import importlib.resources as r, jetrun; "+
		"print(jetrun.__file__); print(r.files('jetrun').joinpath('py.typed').is_file()); "+
		"print(callable(jetrun.serve), callable(jetrun.Client))")
	lines := strings.Split(strings.TrimSpace(where), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], venv+"/lib/") || lines[1] != "True" || lines[2] != "True True" {
		t.Fatalf("the venv imports jetrun from %q; want its site-packages, with py.typed, serve and Client", where)
	}
	meta := pipRun(t, tmp, py, "-m", "pip", "show", "-f", "jetrun")
	for _, f := range []string{"Name: jetrun", "jetrun/child.py", "jetrun/client.py", "jetrun/subagents.py", "jetrun/py.typed"} {
		if !strings.Contains(meta, f) {
			t.Errorf("pip show -f jetrun lacks %q:\n%s", f, meta)
		}
	}

	e := newEnv(t)
	path := filepath.Join(tmp, "wc.py")
	if err := os.WriteFile(path, []byte(readmePythonChild(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.childWorker(t, "py-pip", map[string]string{"JETRUN_EXEC_AGENTS": "wc=" + py + " " + path})
	e.dispatchInput(t, "wc", "py-pip-1", map[string]any{"text": "b a b c", "approval": true})
	jetruntest.WaitRow(t, e.store, "py-pip-1", 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "approve" || r.Status.Final() })
	if _, err := e.client.Signal(context.Background(), "py-pip-1", "approve", map[string]bool{"approved": true}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "py-pip-1", 30*time.Second, jetruntest.Final)
	var counts map[string]int
	_ = json.Unmarshal(row.Output, &counts)
	if row.Status != events.StatusCompleted || row.Summary != "most common: b" || fmt.Sprint(counts) != "map[a:1 b:2 c:1]" {
		t.Fatalf("row: %s %q %s (%s)", row.Status, row.Summary, row.Output, row.Error)
	}
	if got := storedSteps(waitFinalEvent(t, e.js, "py-pip-1")); !slices.Equal(got, []string{"count@1"}) {
		t.Errorf("stored steps %v", got)
	}
}

// sdkCopy copies what pip builds the package from (pyproject.toml,
// README.md and the jetrun package) into dir/src and returns that: an
// in-tree build with --no-build-isolation writes build/ and
// jetrun.egg-info/ beside its sources, and must not write into the
// checkout.
func sdkCopy(t *testing.T, dir string) string {
	t.Helper()
	src, dst := sdkPython(t), filepath.Join(dir, "src")
	if err := os.CopyFS(filepath.Join(dst, "jetrun"), os.DirFS(filepath.Join(src, "jetrun"))); err != nil {
		t.Fatalf("copy the package to build: %v", err)
	}
	for _, f := range []string{"pyproject.toml", "README.md"} {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
