package e2e_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// examples/README.md, the index a newcomer reads, names every example
// program, and every repository path the examples' READMEs name exists
// (a test file, a doc, another example).
func TestExamplesReadmeNamesEveryExample(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	index, err := os.ReadFile(filepath.Join(root, "examples", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	programs, err := filepath.Glob(filepath.Join(root, "examples", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range programs {
		switch filepath.Ext(p) {
		case ".py", ".sh", ".mjs", ".js":
		default:
			continue
		}
		n++
		rel, _ := filepath.Rel(filepath.Join(root, "examples"), p)
		if !strings.Contains(string(index), filepath.Base(p)) {
			t.Errorf("examples/README.md does not name %s", rel)
		}
	}
	if n < 5 {
		t.Fatalf("found %d example programs", n)
	}

	mds, err := filepath.Glob(filepath.Join(root, "examples", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(root, "examples", "*", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	repoPath := regexp.MustCompile(`\b(?:internal|docs|examples|pkg|cmd|nats-cluster)/[A-Za-z0-9_./-]*[A-Za-z0-9_/]`)
	link := regexp.MustCompile(`\]\(([^)#:]+)(?:#[^)]*)?\)`)
	for _, md := range append(mds, more...) {
		text, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, md)
		for _, p := range repoPath.FindAllString(string(text), -1) {
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("%s names %s, which does not exist", rel, p)
			}
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(md), m[1])); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, m[1])
			}
		}
	}
}

// docs/operations.md says how to get the nats-server a cluster (or
// nats.conf) runs on: the make target it names builds the version go.mod
// pins, and the go install line it shows pins that version too.
func TestOperationsSaysHowToGetNatsServer(t *testing.T) {
	t.Parallel()
	text := operations(t)
	if !strings.Contains(text, "`make nats-server`") {
		t.Fatal("docs/operations.md does not say how to get nats-server (`make nats-server`)")
	}
	root := repoRoot(t)
	list := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -m nats-server: %v", err)
	}
	pinned := strings.TrimSpace(string(out))

	dir := t.TempDir()
	build := exec.Command("make", "--no-print-directory", "nats-server", "BIN="+dir)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make nats-server: %v\n%s", err, out)
	}
	version, err := exec.Command(filepath.Join(dir, "nats-server"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("nats-server --version: %v\n%s", err, version)
	}
	if got := strings.TrimSpace(string(version)); got != "nats-server: "+pinned {
		t.Errorf("make nats-server built %q; go.mod pins %s", got, pinned)
	}

	install := regexp.MustCompile("`go install github.com/nats-io/nats-server/v2@(v[0-9.]+)`").FindStringSubmatch(text)
	if install == nil {
		t.Fatal("docs/operations.md shows no go install line for nats-server")
	}
	if install[1] != pinned {
		t.Errorf("docs/operations.md installs nats-server %s; go.mod pins %s", install[1], pinned)
	}
}
