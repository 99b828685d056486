package model_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// stateFields are the fields of a run's row that only package model
// writes (through Apply): its status and what goes with it, its holder,
// its attempts, its wait, its cancel, its key's bookkeeping, its budgets
// and usage, and its delivery ledger (every field of FinishState,
// NoticeState and Slot).
var stateFields = map[string]bool{
	"Status": true, "Reason": true, "Error": true, "Retryable": true, "ChildStillRunning": true,
	"Attempt": true, "Handoffs": true, "HandedOff": true, "Blinks": true,
	"Worker": true, "WorkerEpoch": true, "LeaseUntil": true,
	"WaitingFor": true, "LastSignalAt": true, "SignalsSeen": true,
	"CancelRequested": true, "CancelReason": true, "Teardown": true,
	"StartedAt": true, "FinishedAt": true, "ReadyAt": true,
	"DispatchSeq": true, "Redispatches": true, "NotBefore": true,
	"SupersededBy": true, "MergedInto": true, "Merged": true,
	"Finishes": true, "Delivered": true, "Notices": true,
	"Usage": true, "StepUsage": true, "TreeUsage": true, "TreeRuns": true, "ChargeMarks": true, "Overrun": true,
}

// ledgerTypes are the row's delivery ledger types: every field is state.
var ledgerTypes = map[string]bool{"FinishState": true, "NoticeState": true, "Slot": true}

const (
	modulePath = "github.com/jetrun/jetrun"
	modelPath  = modulePath + "/internal/engine/model"
)

// viewCopies are the functions outside package model that write state
// fields of a copy of a row that is never stored, each with its reason.
var viewCopies = map[string]string{
	modulePath + "/internal/app/runview.Summarize": "a display copy of a row, clipped, never written back",
}

// TestOnlyModelWritesState fails when a non-test file outside package
// model assigns a state field of a run's row (=, op=, ++, --, delete of a
// map entry), so every transition goes through model.Apply: the grep of
// issue 36, with types, so a field of another type with the same name
// (an event's Status, a task's Error) does not count.
func TestOnlyModelWritesState(t *testing.T) {
	lines := map[string]bool{}
	for _, f := range checkedModule(t).writes {
		t.Errorf("%s writes a run row's state outside package model; apply a model event instead", f)
		lines[f[:strings.LastIndex(f, ":")]] = true
	}
	t.Logf("%d lines write state fields outside %s", len(lines), modelPath)
}

// TestNoClockInsideACompareAndSet fails when a function given to a
// compare-and-set of a row (runstore.Store.Mutate, MutateFrom,
// RewriteFinal, and the worker's writes) reads the clock: the time of a
// transition is read once, before, and passed in (model.Apply's now), so
// that a retried write is the same write.
func TestNoClockInsideACompareAndSet(t *testing.T) {
	for _, f := range checkedModule(t).clocks {
		t.Errorf("%s reads the clock inside a compare-and-set; read it before and pass it in", f)
	}
}

// module is what the checks found in the module's non-test packages but
// model.
type module struct {
	writes []string // state-field writes
	clocks []string // clock reads inside compare-and-set functions
}

var (
	moduleOnce sync.Once
	moduleErr  error
	moduleSeen module
)

// checkedModule type-checks the module once for the tests.
func checkedModule(t *testing.T) module {
	t.Helper()
	moduleOnce.Do(func() { moduleSeen, moduleErr = checkModule() })
	if moduleErr != nil {
		t.Fatal(moduleErr)
	}
	return moduleSeen
}

// checkModule type-checks every non-test package of the module but model
// and returns what it finds in them.
func checkModule() (module, error) {
	var m module
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return m, err
	}
	exports, err := goList(root, "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", "./...")
	if err != nil {
		return m, err
	}
	exportOf := map[string]string{}
	for _, l := range exports {
		path, file, _ := strings.Cut(l, "\t")
		exportOf[path] = file
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file := exportOf[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	pkgs, err := goList(root, "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}", "./...")
	if err != nil {
		return m, err
	}
	checked := 0
	for _, l := range pkgs {
		parts := strings.Split(l, "\t")
		path, dir, files := parts[0], parts[1], parts[2]
		if path == modelPath || files == "" {
			continue
		}
		var parsed []*ast.File
		for _, name := range strings.Split(files, ",") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				return m, err
			}
			parsed = append(parsed, f)
		}
		info := &types.Info{
			Selections: map[*ast.SelectorExpr]*types.Selection{},
			Types:      map[ast.Expr]types.TypeAndValue{},
			Uses:       map[*ast.Ident]types.Object{},
		}
		if _, err := (&types.Config{Importer: imp}).Check(path, fset, parsed, info); err != nil {
			return m, fmt.Errorf("type-check %s: %w", path, err)
		}
		checked++
		for _, f := range parsed {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil || viewCopies[path+"."+fd.Name.Name] != "" {
					continue
				}
				m.writes = append(m.writes, writesIn(fset, root, fd.Body, info)...)
				m.clocks = append(m.clocks, clocksIn(fset, root, fd.Body, info)...)
			}
		}
	}
	if checked < 20 {
		return m, fmt.Errorf("type-checked %d packages; too few to mean anything", checked)
	}
	return m, nil
}

// at names the position of n, relative to root.
func at(fset *token.FileSet, root string, n ast.Node) string {
	p := fset.Position(n.Pos())
	rel, _ := filepath.Rel(root, p.Filename)
	return fmt.Sprintf("%s:%d", rel, p.Line)
}

// casMethods are the methods whose function argument runs inside a
// compare-and-set of a row.
var casMethods = map[string]bool{"Mutate": true, "MutateFrom": true, "RewriteFinal": true, "write": true, "writeFinal": true}

// clocksIn returns the clock reads (time.Now, time.Since, time.Until)
// inside function literals given to a compare-and-set in body.
func clocksIn(fset *token.FileSet, root string, body *ast.BlockStmt, info *types.Info) []string {
	var out []string
	ast.Inspect(body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !casMethods[sel.Sel.Name] || info.Selections[sel] == nil {
			return true
		}
		for _, arg := range call.Args {
			lit, ok := arg.(*ast.FuncLit)
			if !ok {
				continue
			}
			ast.Inspect(lit.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					if fn, ok := info.Uses[id].(*types.Func); ok && fn.Pkg() != nil && fn.Pkg().Path() == "time" &&
						(fn.Name() == "Now" || fn.Name() == "Since" || fn.Name() == "Until") {
						out = append(out, fmt.Sprintf("%s: time.%s", at(fset, root, id), fn.Name()))
					}
				}
				return true
			})
		}
		return true
	})
	return out
}

// writesIn returns the state-field writes in body.
func writesIn(fset *token.FileSet, root string, body *ast.BlockStmt, info *types.Info) []string {
	var out []string
	report := func(n ast.Node, field string) { out = append(out, at(fset, root, n)+": "+field) }
	ast.Inspect(body, func(n ast.Node) bool {
		var targets []ast.Expr
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok != token.DEFINE {
				targets = n.Lhs
			}
		case *ast.IncDecStmt:
			targets = []ast.Expr{n.X}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "delete" && len(n.Args) > 0 {
				targets = n.Args[:1]
			}
		}
		for _, x := range targets {
			if field := stateField(x, info); field != "" {
				report(x, field)
			}
		}
		return true
	})
	return out
}

// stateField returns the state field x writes ("" if none): x, or the map
// or slice x indexes, is a state field of a row or its ledger.
func stateField(x ast.Expr, info *types.Info) string {
	for {
		switch e := x.(type) {
		case *ast.ParenExpr:
			x = e.X
			continue
		case *ast.IndexExpr:
			x = e.X
			continue
		case *ast.StarExpr:
			// *r = ... replaces a whole row.
			if isRowType(info.Types[e.X].Type) {
				return "*row"
			}
			return ""
		case *ast.SelectorExpr:
			sel := info.Selections[e]
			if sel == nil || sel.Kind() != types.FieldVal {
				return ""
			}
			owner := ownerName(sel.Recv())
			switch {
			case owner == "Row":
				if stateFields[e.Sel.Name] {
					return owner + "." + e.Sel.Name
				}
			case ledgerTypes[owner]:
				return owner + "." + e.Sel.Name
			}
			// A field of a field (r.Finishes[s].DueAt, r.Overrun.Used):
			// its container decides.
			x = e.X
			continue
		}
		return ""
	}
}

// ownerName names the stored row or ledger type t is (through pointers), or "".
func ownerName(t types.Type) string {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok || n.Obj().Pkg() == nil {
		return ""
	}
	if path, name := n.Obj().Pkg().Path(), n.Obj().Name(); path == modelPath && (name == "Row" || ledgerTypes[name]) {
		return name
	}
	return ""
}

// isRowType reports whether t is a row type or a pointer to one.
func isRowType(t types.Type) bool {
	if t == nil {
		return false
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	return ownerName(t) == "Row"
}

// goList runs go list in dir and returns its output lines.
func goList(dir string, args ...string) ([]string, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return slices.DeleteFunc(strings.Split(strings.TrimSpace(string(out)), "\n"), func(s string) bool { return s == "" }), nil
}
