package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The Python library's type hints hold (as tsc checks the TypeScript
// library's): mypy --strict accepts the package, for the running Python
// and for 3.8, the oldest pyproject.toml allows, and the README's
// ten-line child type-checks against it (--no-warn-return-any: a run's
// input is JSON, typed Any). make deps installs Debian's mypy.
func TestPythonSDKTypeChecks(t *testing.T) {
	t.Parallel()
	mypy := interpreter(t, "mypy")
	child := filepath.Join(t.TempDir(), "readme_child.py")
	if err := os.WriteFile(child, []byte(readmePythonChild(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--strict", filepath.Join(sdkPython(t), "jetrun")},
		{"--strict", "--python-version", "3.8", filepath.Join(sdkPython(t), "jetrun")}, // pyproject's requires-python
		{"--strict", "--no-warn-return-any", child},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, mypy, append([]string{"--cache-dir", t.TempDir()}, args...)...)
		cmd.Dir = sdkPython(t)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MYPYPATH=" + sdkPython(t)}
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("mypy %v: %v\n%s", args, err, out)
		}
	}
}
