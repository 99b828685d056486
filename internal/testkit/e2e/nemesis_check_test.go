//go:build cluster

package e2e_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
)

// state is what the system holds once it settled: every row, and the
// status and step events of every run.
type state struct {
	rows     map[string]*model.Row
	statuses map[string][]statusEv // by run, in stream order
	steps    map[string][]stepEv   // by run, in stream order
	late     []string              // runs that did not end or settle in time
}

type statusEv struct {
	seq  uint64
	ev   events.StatusEvent
	owed string // the Jetrun-Finish-Owed header
}

type stepEv struct {
	seq uint64
	ev  events.Step
}

// settle waits until every run ended and owes nothing, up to timeout,
// then reads every row and event.
func settle(t *testing.T, js jetstream.JetStream, ld *load, timeout time.Duration) *state {
	t.Helper()
	start := time.Now()
	var rows map[string]*model.Row
	var open []string
	for {
		rows = readRows(t, js, ld)
		open = open[:0]
		for id, r := range rows {
			if !r.Settled() {
				open = append(open, id)
			}
		}
		if len(open) == 0 || time.Since(start) > timeout {
			break
		}
		time.Sleep(2 * time.Second) // poll with a deadline
	}
	t.Logf("nemesis: %d runs (nested ones included); %d settled %s after the load stopped, %d did not",
		len(rows), len(rows)-len(open), time.Since(start).Round(time.Second), len(open))
	// Every run ended: its awaiting caller sees it on its own (an Await
	// reads its row at least every 5 s when it hears nothing), given the
	// time; callers of runs that never ended stop after that grace.
	awaited := make(chan struct{})
	go func() {
		ld.awaiting.Wait()
		close(awaited)
	}()
	select {
	case <-awaited:
	case <-time.After(30 * time.Second):
	}
	ld.stopWait()
	st := &state{rows: rows, statuses: map[string][]statusEv{}, steps: map[string][]stepEv{}}
	slices.Sort(open)
	st.late = open
	readEvents(t, js, st)
	return st
}

// readRows reads every run's row as the runs bucket's leader has it: the
// keys listed, and the runs the load dispatched that the listing missed. A
// plain Get may be answered by a replica that is behind (a node restarted
// seconds ago): a row it does not have yet is not a lost run.
func readRows(t *testing.T, js jetstream.JetStream, ld *load) map[string]*model.Row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, err := js.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatalf("nemesis: runs bucket: %v", err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatalf("nemesis: list runs: %v", err)
	}
	ids := map[string]bool{}
	for k := range keys.Keys() {
		ids[k] = true
	}
	for _, p := range ld.plans {
		ids[p.id] = true
	}
	rows := map[string]*model.Row{}
	for id := range ids {
		r, _, err := ld.store.Latest(ctx, id)
		if errors.Is(err, runstore.ErrRunNotFound) {
			continue // never created, or cleared meanwhile
		}
		if err != nil {
			t.Fatalf("nemesis: read row %s from the leader: %v", id, err)
		}
		rows[r.ID] = r
	}
	return rows
}

// readEvents reads every status and step event of the events streams.
func readEvents(t *testing.T, js jetstream.JetStream, st *state) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var streams []string
	for s := range js.StreamNames(ctx).Name() {
		if strings.HasPrefix(s, "JETRUN_EVENTS") {
			streams = append(streams, s)
		}
	}
	if len(streams) != 1 {
		// One stream: the keyed check compares sequences across runs.
		t.Fatalf("nemesis: want one events stream, found %v", streams)
	}
	cons, err := js.OrderedConsumer(ctx, streams[0], jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"jetrun.run.*.status", "jetrun.run.*.step"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left, empty := info.NumPending, 0
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, _ := m.Metadata()
			parts := strings.Split(m.Subject(), ".")
			id, kind := parts[2], parts[3]
			switch kind {
			case events.KindStatus:
				var ev events.StatusEvent
				if err := json.Unmarshal(m.Data(), &ev); err != nil {
					t.Errorf("nemesis: status event %d of %s: %v", meta.Sequence.Stream, id, err)
					continue
				}
				st.statuses[id] = append(st.statuses[id], statusEv{seq: meta.Sequence.Stream, ev: ev,
					owed: m.Headers().Get(events.HeaderFinishOwed)})
			case events.KindStep:
				var ev events.Step
				if err := json.Unmarshal(m.Data(), &ev); err != nil {
					t.Errorf("nemesis: step event %d of %s: %v", meta.Sequence.Stream, id, err)
					continue
				}
				st.steps[id] = append(st.steps[id], stepEv{seq: meta.Sequence.Stream, ev: ev})
			}
		}
		if got == 0 {
			// An ordered consumer that resets delivers nothing for a while.
			if empty++; empty < 6 {
				continue
			}
			t.Fatalf("nemesis: events stopped short: %d left", left)
		}
		empty = 0
		left -= uint64(got)
	}
}

// execution is one execution of a step's work, from the execution log.
type execution struct {
	run, step string
	attempt   int
	usage     events.UsageTotals
}

func readExecLogs(t *testing.T, dir string) map[string][]execution {
	t.Helper()
	out := map[string][]execution{}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e execution
			var tag string
			if _, err := fmt.Sscanf(sc.Text(), "%s %s %s %d %d %d %d", &tag, &e.run, &e.step, &e.attempt,
				&e.usage.InputTokens, &e.usage.OutputTokens, &e.usage.CostMicros); err != nil {
				t.Errorf("nemesis: execution log %s: %q: %v", name, sc.Text(), err)
				continue
			}
			out[e.run] = append(out[e.run], e)
		}
		f.Close()
	}
	return out
}

// report is the outcome of the checks.
type report struct {
	violations []violation
	tally      map[string]counts
	figures    []string
}

// violation is one broken promise, with the check that found it.
type violation struct{ check, text string }

// knownDefects names the checks whose violations issue 35 already
// reports, with the item.
var knownDefects = map[string]string{}

func (r *report) violate(check, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if known := knownDefects[check]; known != "" {
		text += " [" + known + "]"
	}
	r.violations = append(r.violations, violation{check: check, text: text})
}

func (r *report) count(group, name string) {
	if r.tally[group] == nil {
		r.tally[group] = counts{}
	}
	r.tally[group][name]++
}

// byCheck counts the violations by check.
func (r *report) byCheck() counts {
	c := counts{}
	for _, v := range r.violations {
		c[v.check]++
	}
	return c
}

func (r *report) summary(n *nemesis) string {
	faults := counts{}
	unhealed := 0
	for _, f := range n.faults {
		faults[f.kind]++
		if f.problem != "" {
			unhealed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "nemesis summary: %d violations (%s); faults %d (%s; %d did not heal)", len(r.violations), r.byCheck(),
		len(n.faults), faults, unhealed)
	for _, g := range []string{"top-level runs", "nested runs", "finishes", "steps", "awaits"} {
		fmt.Fprintf(&b, "\n  %s: %s", g, r.tally[g])
	}
	for _, f := range r.figures {
		fmt.Fprintf(&b, "\n  %s", f)
	}
	return b.String()
}

// checker holds what the checks read.
type checker struct {
	st       *state
	plans    map[string]*plan
	execs    map[string][]execution
	calls    []hookCall
	faults   []fault
	children map[string][]string // run → its nested runs
	lo, hi   map[string]events.UsageTotals
	rep      *report
}

func check(st *state, ld *load, hook *nemesisHook, execs map[string][]execution, faults []fault) *report {
	c := &checker{st: st, plans: map[string]*plan{}, execs: execs, calls: hook.snapshot(), faults: faults,
		children: map[string][]string{}, lo: map[string]events.UsageTotals{}, hi: map[string]events.UsageTotals{},
		rep: &report{tally: map[string]counts{}}}
	ld.mu.Lock()
	for _, p := range ld.plans {
		c.plans[p.id] = p
	}
	ld.mu.Unlock()
	for _, r := range st.rows {
		if r.Parent != "" {
			c.children[r.Parent] = append(c.children[r.Parent], r.ID)
		}
	}
	c.ended()
	c.completedOnce()
	c.finishes()
	c.stepsAndUsage()
	c.trees()
	c.budgets()
	c.keys()
	c.awaits()
	slices.SortFunc(c.rep.violations, func(a, b violation) int {
		return cmp.Or(strings.Compare(a.check, b.check), strings.Compare(a.text, b.text))
	})
	return c.rep
}

// top returns the plan of the tree r belongs to, nil if none.
func (c *checker) top(r *model.Row) *plan {
	for r != nil && r.Parent != "" {
		r = c.st.rows[r.Parent]
	}
	if r == nil {
		return nil
	}
	return c.plans[r.ID]
}

// tree returns id and every run nested under it.
func (c *checker) tree(id string) []string {
	out := []string{id}
	for i := 0; i < len(out); i++ {
		out = append(out, c.children[out[i]]...)
	}
	return out
}

func describe(r *model.Row) string {
	s := fmt.Sprintf("%s %s/%s attempt %d", r.AgentType, r.Status, r.Reason, r.Attempt)
	if r.Error != "" {
		s += fmt.Sprintf(" error %q", r.Error)
	}
	if r.Handoffs > 0 || len(r.Blinks) > 0 {
		s += fmt.Sprintf(" handoffs %d blinks %v", r.Handoffs, r.Blinks)
	}
	if r.Worker != "" {
		s += " worker " + r.Worker
	}
	if r.ChildStillRunning {
		s += " childStillRunning"
	}
	return s
}

// ended: every dispatched run has a row, every row ended as expected and
// owes nothing.
func (c *checker) ended() {
	for _, p := range c.plans {
		r := c.st.rows[p.id]
		switch {
		case r == nil && p.dispatchErr == nil:
			c.rep.violate("lost", "run %s (%s) was dispatched but has no row", p.id, p.kind)
		case r == nil:
			c.rep.count("top-level runs", p.kind+" dispatch-failed")
		default:
			c.rep.count("top-level runs", p.kind+" "+string(r.Status))
		}
	}
	for _, id := range c.st.late {
		r := c.st.rows[id]
		if !ended(r) {
			c.rep.violate("not-ended", "run %s did not end: %s; status events %s", id, describe(r), c.history(id))
		} else {
			c.rep.violate("finish-owed", "run %s ended but still owes a finish: %s; pending %v", id, describe(r), r.PendingFinishes())
		}
	}
	for id, r := range c.st.rows {
		if r.Parent != "" {
			c.rep.count("nested runs", r.AgentType+" "+string(r.Status))
		}
		if !ended(r) {
			continue
		}
		p := c.top(r)
		switch {
		case r.Status == events.StatusCompleted:
		case r.Status == events.StatusAborted && r.Reason == events.ReasonSuperseded:
		case r.Status == events.StatusInterrupted && r.Reason == events.ReasonBudgetExceeded && p != nil && p.budgeted:
		default:
			c.rep.violate("unexpected-end", "run %s ended unexpectedly: %s; status events %s", id, describe(r), c.history(id))
		}
	}
}

// history lists run id's status events: status#attempt, the finish a
// transition owes in brackets.
func (c *checker) history(id string) string {
	var out []string
	for _, e := range c.st.statuses[id] {
		s := fmt.Sprintf("%s#%d", e.ev.Status, e.ev.Attempt)
		if e.owed != "" {
			s += "[" + e.owed + "]"
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// completedOnce: no run has two "completed" status events.
func (c *checker) completedOnce() {
	for id, evs := range c.st.statuses {
		n := 0
		for _, e := range evs {
			if e.ev.Status == events.StatusCompleted {
				n++
			}
		}
		if n > 1 {
			c.rep.violate("completed-twice", "run %s completed %d times (status events)", id, n)
		}
	}
}

// finishKey is the idempotency key of the finish for status s of r.
func finishKey(r *model.Row, s events.Status) string {
	k := r.ID + "." + string(s)
	if f := r.Finishes[s]; f != nil && f.Ending > 0 {
		k += "." + strconv.Itoa(f.Ending+1)
	}
	return k
}

// finishes: every finish a detached run is owed reached the webhook, by
// its idempotency key; nothing else did; a key called more than once only
// across a fault.
func (c *checker) finishes() {
	byKey := map[string][]hookCall{}
	for _, call := range c.calls {
		byKey[call.key] = append(byKey[call.key], call)
	}
	owed := map[string]bool{}
	for id, r := range c.st.rows {
		for _, e := range c.st.statuses[id] {
			if e.owed == "" {
				continue
			}
			if r.Detached == nil || r.Finishes[events.Status(e.owed)] == nil {
				c.rep.violate("finish-unrecorded", "run %s: status event %d owes a finish %s the row does not record (detached %v)", id, e.seq, e.owed, r.Detached != nil)
			}
		}
		if r.Detached == nil {
			continue
		}
		for s, f := range r.Finishes {
			key := finishKey(r, s)
			owed[key] = true
			c.rep.count("finishes", "owed")
			switch n := len(byKey[key]); {
			case !f.FailedAt.IsZero():
				c.rep.violate("finish-given-up", "run %s: finish %s given up: %s; status events %s", id, key, f.LastError, c.history(id))
			case n == 0:
				c.rep.violate("finish-missing", "run %s: finish %s never reached the webhook (delivered %v, attempts %d, lastError %q)",
					id, key, !r.Delivered[s].IsZero(), f.Attempts, f.LastError)
			case r.Delivered[s].IsZero():
				c.rep.violate("finish-unmarked", "run %s: finish %s reached the webhook but the row does not record it delivered", id, key)
			default:
				c.rep.count("finishes", "delivered")
			}
		}
	}
	for key, calls := range byKey {
		if !owed[key] {
			c.rep.violate("finish-unexpected", "webhook got finish %s (%d calls, run %s, status %s), which no row owes", key, len(calls), calls[0].runID, calls[0].status)
			continue
		}
		c.rep.count("finishes", "calls")
		if len(calls) == 1 {
			continue
		}
		first, last := calls[0].at, calls[len(calls)-1].at
		if c.faultBetween(first, last) {
			c.rep.count("finishes", "duplicate across a fault")
			continue
		}
		c.rep.violate("finish-duplicate", "run %s: finish %s reached the webhook %d times (%s apart) with no fault in between",
			calls[0].runID, key, len(calls), last.Sub(first).Round(time.Millisecond))
	}
}

// faultBetween reports whether a fault was under way between a and b, or
// had healed less than twice the finish claim's timeout (2 s) before a.
func (c *checker) faultBetween(a, b time.Time) bool {
	for _, f := range c.faults {
		if !f.began.After(b) && !f.healed.Add(4*time.Second).Before(a) {
			return true
		}
	}
	return false
}

// totals is a usage's totals (zero for none).
func totals(u *events.Usage) events.UsageTotals {
	if u == nil {
		return events.UsageTotals{}
	}
	return u.UsageTotals
}

// below reports whether a is less than b in any of its counts.
func below(a, b events.UsageTotals) bool {
	return a.InputTokens < b.InputTokens || a.OutputTokens < b.OutputTokens || a.CostMicros < b.CostMicros
}

// stepsAndUsage: a step is stored once; a stored step's work never ran
// again; each run's usage lies between what its stored steps reported
// (nothing stored is lost) and what every execution of its work reported
// (nothing counted twice), exactly the former when no work was lost.
func (c *checker) stepsAndUsage() {
	for id, r := range c.st.rows {
		stored := map[string]stepEv{}
		var lo events.UsageTotals
		for _, s := range c.st.steps[id] {
			if first, ok := stored[s.ev.Name]; ok {
				c.rep.violate("step-stored-twice", "run %s: step %s stored twice (events %d and %d, attempts %d and %d)", id, s.ev.Name, first.seq, s.seq,
					first.ev.Attempt, s.ev.Attempt)
				continue
			}
			stored[s.ev.Name] = s
			lo = lo.Add(totals(s.ev.Usage))
			c.rep.count("steps", "stored")
		}
		var hi events.UsageTotals
		switch r.AgentType {
		case "nm-step", "nm-nest":
			hi = c.executions(r, stored)
		case demo.AgentType:
			for name, s := range stored {
				want := events.UsageTotals{InputTokens: demo.LeadUsage.InputTokens, OutputTokens: demo.LeadUsage.OutputTokens, CostMicros: demo.LeadUsage.CostMicros}
				if totals(s.ev.Usage) != want {
					c.rep.violate("step-usage", "run %s: step %s stored usage %+v, its work reported %+v", id, name, totals(s.ev.Usage), want)
				}
			}
			// Each attempt that did not end it may have reported one
			// step it did not store.
			hi = lo
			for range max(r.Attempt, 1) {
				hi = hi.Add(events.UsageTotals{InputTokens: demo.LeadUsage.InputTokens, OutputTokens: demo.LeadUsage.OutputTokens, CostMicros: demo.LeadUsage.CostMicros})
			}
		}
		c.lo[id], c.hi[id] = lo, hi
		u := totals(r.Usage)
		c.rep.count("usage", "runs")
		switch {
		case below(u, lo):
			c.rep.violate("usage-lost", "run %s: usage %+v is less than its stored steps reported %+v (%d steps; %s)",
				id, u, lo, len(stored), describe(r))
		case below(hi, u):
			c.rep.violate("usage-over", "run %s: usage %+v is more than every execution of its work reported %+v (%s)", id, u, hi, describe(r))
		}
	}
}

// executions checks the execution log of a run of the nemesisworker
// against its stored steps and returns what every execution reported.
func (c *checker) executions(r *model.Row, stored map[string]stepEv) events.UsageTotals {
	var hi events.UsageTotals
	seen := map[string]bool{}
	for _, e := range c.execs[r.ID] {
		hi = hi.Add(e.usage)
		c.rep.count("steps", "executions")
		k := e.step + "#" + strconv.Itoa(e.attempt)
		if seen[k] {
			c.rep.violate("step-ran-again", "run %s: step %s's work ran twice in attempt %d", r.ID, e.step, e.attempt)
		}
		seen[k] = true
		s, ok := stored[e.step]
		switch {
		case !ok:
			c.rep.count("steps", "executions not stored")
		case e.attempt > s.ev.Attempt:
			c.rep.violate("step-ran-again", "run %s: step %s, stored by attempt %d (event %d), ran again in attempt %d", r.ID, e.step, s.ev.Attempt, s.seq, e.attempt)
		case e.attempt < s.ev.Attempt:
			c.rep.count("steps", "executions not stored")
		case totals(s.ev.Usage) != e.usage:
			c.rep.violate("step-usage", "run %s: step %s stored usage %+v, its work reported %+v", r.ID, e.step, totals(s.ev.Usage), e.usage)
		}
	}
	for name, s := range stored {
		if !seen[name+"#"+strconv.Itoa(s.ev.Attempt)] {
			c.rep.violate("step-unexplained", "run %s: step %s stored by attempt %d, whose work never ran", r.ID, name, s.ev.Attempt)
		}
	}
	if r.Status == events.StatusCompleted && r.AgentType == "nm-step" {
		var in struct {
			Steps int `json:"steps"`
		}
		_ = json.Unmarshal(r.Input, &in)
		if len(stored) != in.Steps {
			c.rep.violate("step-missing", "run %s completed with %d of its %d steps stored", r.ID, len(stored), in.Steps)
		}
	}
	return hi
}

// trees: the top of each tree counts at least its runs' usage (a kill -9
// never leaves a run's usage ahead of its tree's) and every stored step's,
// and no more than every execution reported.
func (c *checker) trees() {
	var tokens, micros int64
	var later int
	for id, r := range c.st.rows {
		tokens += totals(r.Usage).Tokens()
		micros += totals(r.Usage).CostMicros
		later += max(r.Attempt-1, 0)
		if r.Parent != "" || len(c.children[id]) == 0 {
			continue
		}
		c.rep.count("usage", "trees")
		var sum, lo, hi events.UsageTotals
		for _, m := range c.tree(id) {
			sum = sum.Add(totals(c.st.rows[m].Usage))
			lo, hi = lo.Add(c.lo[m]), hi.Add(c.hi[m])
		}
		if r.TreeUsage == nil {
			c.rep.violate("tree-usage", "tree %s (%d runs, usage %+v) has no treeUsage", id, len(c.tree(id)), sum)
			continue
		}
		tu := *r.TreeUsage
		switch {
		case below(tu, sum):
			c.rep.violate("tree-usage", "tree %s: treeUsage %+v is less than its runs' usage %+v", id, tu, sum)
		case below(tu, lo):
			c.rep.violate("usage-lost", "tree %s: treeUsage %+v is less than its stored steps reported %+v", id, tu, lo)
		case below(hi, tu):
			c.rep.violate("tree-usage", "tree %s: treeUsage %+v is more than every execution of its work reported %+v", id, tu, hi)
		}
	}
	c.rep.figures = append(c.rep.figures, fmt.Sprintf("usage: %d tokens, %d micros on the runs' rows", tokens, micros),
		fmt.Sprintf("attempts after the first (takeovers and hand-offs): %d", later))
}

// budgets: a tree past its token budget was stopped, by no more than one
// report per run of it; a tree within it was not.
func (c *checker) budgets() {
	for id, p := range c.plans {
		r := c.st.rows[id]
		if !p.budgeted || r == nil {
			continue
		}
		limit := p.req.Budget.Tokens
		var spent int64
		if r.TreeUsage != nil {
			spent = r.TreeUsage.Tokens()
		}
		var stopped []string
		var maxReport int64
		tree := c.tree(id)
		for _, m := range tree {
			row := c.st.rows[m]
			if row.Status == events.StatusInterrupted && row.Reason == events.ReasonBudgetExceeded {
				stopped = append(stopped, m)
			}
			for _, e := range c.execs[m] {
				maxReport = max(maxReport, e.usage.Tokens())
			}
			if row.AgentType == demo.AgentType {
				maxReport = max(maxReport, demo.LeadUsage.InputTokens+demo.LeadUsage.OutputTokens)
			}
		}
		switch {
		case spent > limit:
			c.rep.count("budgets", "exceeded and stopped")
			if r.Status != events.StatusInterrupted || r.Reason != events.ReasonBudgetExceeded || r.Overrun == nil {
				c.rep.violate("budget", "tree %s spent %d tokens of a %d budget but its top was not stopped: %s", id, spent, limit, describe(r))
			}
			if over := spent - limit; over > int64(len(tree))*maxReport {
				c.rep.violate("budget", "tree %s spent %d tokens past its budget of %d: more than one report (%d) per run (%d)", id, over, limit, maxReport, len(tree))
			}
		case len(stopped) > 0:
			c.rep.violate("budget", "tree %s spent %d tokens of a %d budget, yet %v ended budget-exceeded", id, spent, limit, stopped)
		default:
			c.rep.count("budgets", "held")
		}
	}
	c.rep.figures = append(c.rep.figures, "budgets: "+c.rep.tally["budgets"].String())
}

// keys: the runs of one concurrency key ran one at a time: on the events
// stream, each began running after the one before it ended.
func (c *checker) keys() {
	type span struct {
		id         string
		begin, end uint64
	}
	byKey := map[string][]span{}
	for id, p := range c.plans {
		if p.req.ConcurrencyKey == "" {
			continue
		}
		var s = span{id: id}
		for _, e := range c.st.statuses[id] {
			switch {
			case e.ev.Status == events.StatusRunning && s.begin == 0:
				s.begin = e.seq
			case e.ev.Status.Final() || e.ev.Status == events.StatusInterrupted:
				s.end = e.seq
			}
		}
		if s.begin != 0 {
			byKey[p.req.ConcurrencyKey] = append(byKey[p.req.ConcurrencyKey], s)
		}
	}
	runs := 0
	for key, spans := range byKey {
		runs += len(spans)
		slices.SortFunc(spans, func(a, b span) int { return int(a.begin) - int(b.begin) })
		for i := 1; i < len(spans); i++ {
			if prev := spans[i-1]; spans[i].begin < prev.end {
				c.rep.violate("key-overlap", "key %s: run %s began running (event %d) before %s ended (event %d)", key, spans[i].id, spans[i].begin, prev.id, prev.end)
			}
		}
	}
	c.rep.figures = append(c.rep.figures, fmt.Sprintf("concurrency keys: %d runs under %d keys checked one at a time", runs, len(byKey)))
}

// awaits: each awaiting caller saw its run's real end.
func (c *checker) awaits() {
	for id, p := range c.plans {
		r := c.st.rows[id]
		if p.kind != "plain" || r == nil {
			continue
		}
		switch {
		case p.awaited == "":
			c.rep.violate("await", "run %s: its awaiting caller never saw it end (%d errors on the way); the row: %s", id, p.awaitErrs, describe(r))
		case p.awaited != r.Status:
			c.rep.violate("await", "run %s: its awaiting caller saw %s, the row says %s", id, p.awaited, describe(r))
		default:
			c.rep.count("awaits", "saw the end")
			if p.awaitErrs > 0 {
				c.rep.count("awaits", "re-attached after an error")
			}
		}
	}
}
