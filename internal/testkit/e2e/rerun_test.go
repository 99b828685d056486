package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// An eight-turn Python agent loop (examples/python/agent.py, on the jetrun
// library of sdk/python, through the exec type, each model call a
// run.step) re-run from its fifth turn makes the calls of turns 5 to 8
// only, counted by the calls' own ledger: the request carries turns 1 to 4
// as stored steps, and the re-run is charged for the four calls it made.
func TestPythonRerunFromAStepMakesOnlyTheCallsFromIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agents := map[string]string{"JETRUN_EXEC_AGENTS": "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py")}
	e.childWorker(t, "py-rerun", agents)
	dir := t.TempDir()
	first, again := filepath.Join(dir, "first"), filepath.Join(dir, "again")
	input := func(ledger string) map[string]any {
		return map[string]any{"question": "tides", "turns": 8, "delay": 0.01, "ledger": ledger}
	}
	e.dispatchInput(t, "agent-py", "py-r", input(first))
	orig := jetruntest.WaitRow(t, e.store, "py-r", 60*time.Second, jetruntest.Final)
	if orig.Status != events.StatusCompleted {
		t.Fatalf("original: %s %s", orig.Status, orig.Error)
	}
	if _, err := e.client.Rerun(context.Background(), "py-r", parent.RerunRequest{FromStep: "think-5", RunID: "py-r5", Input: input(again)}); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, e.store, "py-r5", 60*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.ForkedFrom == nil || row.ForkedFrom.RunID != "py-r" {
		t.Fatalf("re-run: %s %s forkedFrom %+v", row.Status, row.Error, row.ForkedFrom)
	}
	calls := func(ledger string) []string {
		var names []string
		for _, l := range counterLines(t, ledger) {
			if strings.HasPrefix(l, "think-") {
				names = append(names, l)
			}
		}
		return names
	}
	want := func(from, to int) []string {
		var out []string
		for n := from; n <= to; n++ {
			out = append(out, fmt.Sprintf("think-%d", n))
		}
		return out
	}
	if got := calls(first); !slices.Equal(got, want(1, 8)) {
		t.Errorf("the original made calls %v", got)
	}
	got := calls(again)
	t.Logf("Python re-run from think-5 made %d calls: %v", len(got), got)
	if !slices.Equal(got, want(5, 8)) {
		t.Errorf("the re-run made calls %v, want think-5..think-8", got)
	}
	var given, made []string
	for _, ev := range waitFinalEvent(t, e.js, "py-r5") {
		if st := ev.Step; st != nil && st.GivenFrom == "py-r" && st.Usage == nil {
			given = append(given, st.Name)
		} else if st != nil {
			made = append(made, st.Name)
		}
	}
	if !slices.Equal(given, want(1, 4)) || !slices.Equal(made, want(5, 8)) {
		t.Errorf("re-run's steps: given %v, made %v", given, made)
	}
	// Each call spends 12 output tokens: the re-run pays for its four.
	if orig.Usage.OutputTokens != 8*12 || row.Usage == nil || row.Usage.OutputTokens != 4*12 {
		t.Errorf("usage: original %+v, re-run %+v", orig.Usage, row.Usage)
	}
}

// A re-run's worker killed with -9 mid-run: the next attempt still finds
// the given steps (and those the re-run stored) and never makes their
// calls; the call running at the kill is made at most twice.
func TestKilledWorkerDuringARerunKeepsItsGivenSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agents := map[string]string{"JETRUN_EXEC_AGENTS": "agent-py=" + python3(t) + " " + examples(t, "python", "agent.py")}
	a := e.childWorker(t, "py-rk-a", agents)
	dir := t.TempDir()
	first, again := filepath.Join(dir, "first"), filepath.Join(dir, "again")
	input := func(ledger string, delay float64) map[string]any {
		return map[string]any{"question": "tides", "turns": 8, "delay": delay, "ledger": ledger}
	}
	e.dispatchInput(t, "agent-py", "py-rk", input(first, 0.01))
	if row := jetruntest.WaitRow(t, e.store, "py-rk", 60*time.Second, jetruntest.Final); row.Status != events.StatusCompleted {
		t.Fatalf("original: %s %s", row.Status, row.Error)
	}
	if _, err := e.client.Rerun(context.Background(), "py-rk", parent.RerunRequest{FromStep: "think-4", RunID: "py-rk4", Input: input(again, 0.2)}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		return slices.Contains(storedSteps(jetruntest.ReadEvents(t, e.js, "py-rk4")), "think-5@1")
	}, "the re-run did not store think-5")
	a.kill()
	e.childWorker(t, "py-rk-b", agents)
	row := jetruntest.WaitRow(t, e.store, "py-rk4", 90*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted || row.Attempt != 2 {
		t.Fatalf("re-run: %s attempt %d %s", row.Status, row.Attempt, row.Error)
	}
	paid := map[string]int{}
	for _, l := range counterLines(t, again) {
		if strings.HasPrefix(l, "think-") {
			paid[l]++
		}
	}
	t.Logf("calls the re-run made across the kill: %v", paid)
	for n := 1; n <= 8; n++ {
		name := fmt.Sprintf("think-%d", n)
		switch c := paid[name]; {
		case n <= 3 && c != 0:
			t.Errorf("given step %s was paid %d times", name, c)
		case n >= 4 && n <= 5 && c != 1:
			t.Errorf("step %s, stored before the kill, was paid %d times", name, c)
		case n > 5 && (c < 1 || c > 2):
			t.Errorf("step %s paid %d times, want 1 or 2", name, c)
		}
	}
}
