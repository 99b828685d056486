package execagent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// fixtureDir holds the shared protocol fixtures (docs/protocol.md,
// "Protocol fixtures"): the Python and TypeScript libraries' tests read
// them too, so the three implementations cannot drift.
var fixtureDir = filepath.Join("..", "..", "..", "..", "docs", "protocol", "fixtures")

// fixture is one fixture file: the attempts of one run, each the request
// its child receives and the verbs the child calls with the lines each
// writes ("out", "text") and reads ("in"), then what the run ends as.
type fixture struct {
	Description string `json:"description"`
	Attempts    []struct {
		Request json.RawMessage `json:"request"`
		// Child is what the child does: each verb a library calls, with its
		// arguments, what it returns (or raises), whether a step's function
		// runs, and the lines it writes and reads. The worker sees the lines.
		Child []struct {
			Verb    string          `json:"verb"`
			Args    json.RawMessage `json:"args"`
			Runs    *bool           `json:"runs,omitempty"`
			Returns json.RawMessage `json:"returns,omitempty"`
			Raises  string          `json:"raises,omitempty"`
			Lines   []fixtureLine   `json:"lines"`
		} `json:"child"`
	} `json:"attempts"`
	Outcome struct {
		Status     events.Status     `json:"status"`
		Attempt    int               `json:"attempt"`
		Summary    string            `json:"summary"`
		Output     json.RawMessage   `json:"output"`
		Error      string            `json:"error"`
		Chunks     []json.RawMessage `json:"chunks"`
		Milestones []string          `json:"milestones"`
		Progress   json.RawMessage   `json:"progress"`
		Steps      []struct {
			Name    string             `json:"name"`
			Output  json.RawMessage    `json:"output"`
			Attempt int                `json:"attempt"`
			Usage   events.UsageTotals `json:"usage"`
		} `json:"steps"`
		Usage *events.UsageTotals `json:"usage"`
	} `json:"outcome"`
}

// fixtureLine is one line of an exchange: an event line the child writes
// ("out", written after the marker), a plain stdout line ("text"), or a
// line the child reads on stdin ("in").
type fixtureLine struct {
	Out  json.RawMessage `json:"out,omitempty"`
	Text *string         `json:"text,omitempty"`
	In   json.RawMessage `json:"in,omitempty"`
}

// lines returns an attempt's lines in order.
func (f *fixture) lines(attempt int) []fixtureLine {
	var out []fixtureLine
	for _, c := range f.Attempts[attempt].Child {
		out = append(out, c.Lines...)
	}
	return out
}

func loadFixtures(dir string) (map[string]*fixture, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no fixtures in %s: %v", dir, err)
	}
	out := make(map[string]*fixture, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var f fixture
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = &f
	}
	return out, nil
}

// sameJSON reports whether a and b encode the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// replayFixtureChild is the child the fixture test's exec agent type runs
// (this test binary, with the arguments "fixture-child <dir>"): it reads
// the request, finds the fixture attempt it belongs to, checks that the
// worker sent exactly the fixture's request, then writes the attempt's
// lines and checks each line the worker writes back on stdin. A
// difference goes to stderr with exit status 3: the run ends "error" with it.
func replayFixtureChild(dir string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "fixture child: "+format+"\n", args...)
		return 3
	}
	fixtures, err := loadFixtures(dir)
	if err != nil {
		return fail("%v", err)
	}
	in := bufio.NewReader(os.Stdin)
	readLine := func() ([]byte, error) {
		l, err := in.ReadBytes('\n')
		if err != nil && (err != io.EOF || len(l) == 0) {
			return nil, err
		}
		return l, nil
	}
	first, err := readLine()
	if err != nil {
		return fail("read the request: %v", err)
	}
	var got eventline.Request
	if err := json.Unmarshal(first, &got); err != nil {
		return fail("request %s: %v", first, err)
	}
	for name, f := range fixtures {
		for i, a := range f.Attempts {
			var want eventline.Request
			if json.Unmarshal(a.Request, &want) != nil || want.RunID != got.RunID || want.Attempt != got.Attempt {
				continue
			}
			if !sameJSON(first, a.Request) {
				return fail("%s attempt %d: the worker sent the request\n%s\nthe fixture has\n%s", name, got.Attempt, first, a.Request)
			}
			out := bufio.NewWriter(os.Stdout)
			for _, l := range f.lines(i) {
				switch {
				case l.Text != nil:
					fmt.Fprintln(out, *l.Text)
				case l.Out != nil:
					compact, _ := json.Marshal(l.Out)
					fmt.Fprintf(out, "%s%s\n", execagent.Marker, compact)
				case l.In != nil:
					if err := out.Flush(); err != nil {
						return fail("write: %v", err)
					}
					line, err := readLine()
					if err != nil {
						return fail("%s attempt %d: read stdin, want %s: %v", name, got.Attempt, l.In, err)
					}
					if !sameJSON(line, l.In) {
						return fail("%s attempt %d: the worker wrote on stdin\n%s\nthe fixture has\n%s", name, got.Attempt, line, l.In)
					}
				}
			}
			if err := out.Flush(); err != nil {
				return fail("write: %v", err)
			}
			return 0
		}
	}
	return fail("no fixture has run %s attempt %d", got.RunID, got.Attempt)
}

// Every "out" line of every fixture is an event line the Go side parses,
// of the kind its one key names.
func TestFixtureLinesParse(t *testing.T) {
	t.Parallel()
	fixtures, err := loadFixtures(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fixtures {
		for i := range f.Attempts {
			for n, l := range f.lines(i) {
				if l.Out == nil {
					continue
				}
				ev, err := eventline.Parse(n+1, l.Out)
				if err != nil {
					t.Errorf("%s attempt %d line %d %s: %v", name, i+1, n+1, l.Out, err)
					continue
				}
				var keys map[string]json.RawMessage
				_ = json.Unmarshal(l.Out, &keys)
				if _, ok := keys[ev.Kind]; !ok {
					t.Errorf("%s attempt %d line %d %s parsed as %s", name, i+1, n+1, l.Out, ev.Kind)
				}
			}
		}
	}
}

// Each fixture is played by a child of a real exec agent type on a real
// server: the worker sends exactly the fixture's requests and stdin lines
// (the child checks them), and the run ends as the fixture's outcome says,
// with its chunks, milestones, progress, steps and usage.
func TestFixturesAgainstTheWorker(t *testing.T) {
	t.Parallel()
	fixtures, err := loadFixtures(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	w, err := agents.StartPool(context.Background(), rt, worker.Config{}, nil, agents.Configured{Exec: map[string]execagent.Config{
		"fixture": {Path: self, Args: []string{"fixture-child", dir}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := player{client: client, store: engine.From(rt).Store(), asks: engine.From(rt).Asks()}
	for name, f := range fixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			row := p.play(t, f)
			checkOutcome(t, f, row, jetruntest.ReadEvents(t, js, row.ID))
		})
	}
}

// player plays fixtures against a worker pool serving the fixture agent
// type.
type player struct {
	client *parent.Client
	store  *runstore.Store
	asks   *asks.Store
}

// play dispatches the fixture's run and answers its waits and calls with
// the fixture's stdin lines, in order, as the run asks for them. A wait or
// call whose line carries an ask is answered only once the worker stored
// that ask, with the line's kind, title and choices.
func (p player) play(t *testing.T, f *fixture) *model.Row {
	t.Helper()
	client, store := p.client, p.store
	var req eventline.Request
	if err := json.Unmarshal(f.Attempts[0].Request, &req); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.Dispatch(ctx, parent.Request{AgentType: req.AgentType, RunID: req.RunID, Input: req.Input}); err != nil {
		t.Fatal(err)
	}
	var calls int64
	for i := range f.Attempts {
		var asked *events.Ask // the ask of the last out line, if it had one
		for _, l := range f.lines(i) {
			if l.Out != nil {
				asked = lineAsk(t, l.Out)
			}
			if l.In == nil {
				continue
			}
			var in struct {
				Signal *eventline.Signal
				Reply  *eventline.Reply
			}
			if err := json.Unmarshal(l.In, &in); err != nil {
				t.Fatal(err)
			}
			if in.Signal == nil && in.Reply == nil {
				continue // an answer the worker gives by itself (a reservation's)
			}
			if in.Reply != nil { // the run's next call is stored, with no reply yet
				calls++
				natstest.Eventually(t, 30*time.Second, func() bool {
					states, err := client.Calls(ctx, req.RunID)
					return err == nil && len(states) >= int(calls) && states[calls-1].Reply == nil
				}, "run %s did not make call %d", req.RunID, calls)
			} else {
				row := jetruntest.WaitRow(t, store, req.RunID, 30*time.Second, func(r *model.Row) bool {
					return r.Status.Final() || r.WaitingFor == in.Signal.Name
				})
				if row.Status.Final() {
					t.Fatalf("run %s ended %s (%s) before waiting for %s", req.RunID, row.Status, row.Error, in.Signal.Name)
				}
			}
			if asked != nil {
				id := asks.CallID(req.RunID, calls)
				if in.Signal != nil {
					id = asks.SignalID(req.RunID, in.Signal.Name, 0)
				}
				jetruntest.WaitAsk(t, p.asks, id, 30*time.Second, func(a *events.Ask) bool {
					return a.Kind == asked.Kind && a.Title == asked.Title && slices.Equal(a.Choices, asked.Choices)
				})
			}
			switch {
			case in.Signal != nil:
				if _, err := client.Signal(ctx, req.RunID, in.Signal.Name, in.Signal.Payload); err != nil {
					t.Fatal(err)
				}
			case in.Reply != nil:
				if _, err := client.Answer(ctx, req.RunID, calls, in.Reply.Output, in.Reply.Error); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return jetruntest.WaitRow(t, store, req.RunID, 30*time.Second, jetruntest.Final)
}

// lineAsk returns the ask an out line carries, beside a wait or inside a
// call, or nil.
func lineAsk(t *testing.T, out json.RawMessage) *events.Ask {
	t.Helper()
	var l struct {
		Ask  *events.Ask `json:"ask"`
		Call *struct {
			Ask *events.Ask `json:"ask"`
		} `json:"call"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	if l.Call != nil {
		return l.Call.Ask
	}
	return l.Ask
}

func checkOutcome(t *testing.T, f *fixture, row *model.Row, evs []jetruntest.Event) {
	t.Helper()
	want := f.Outcome
	if row.Status != want.Status || row.Attempt != want.Attempt || row.Summary != want.Summary {
		t.Errorf("row %s attempt %d summary %q (%s); want %s attempt %d summary %q",
			row.Status, row.Attempt, row.Summary, row.Error, want.Status, want.Attempt, want.Summary)
	}
	if want.Output != nil && !sameJSON(row.Output, want.Output) {
		t.Errorf("output %s, want %s", row.Output, want.Output)
	}
	if want.Error != "" && row.Error != want.Error {
		t.Errorf("error %q, want %q", row.Error, want.Error)
	}
	if want.Chunks != nil {
		var got []json.RawMessage
		for _, c := range jetruntest.Chunks(evs) {
			got = append(got, c.Data)
		}
		if len(got) != len(want.Chunks) || !slices.EqualFunc(got, want.Chunks, func(a, b json.RawMessage) bool { return sameJSON(a, b) }) {
			t.Errorf("chunks %s, want %s", got, want.Chunks)
		}
	}
	if want.Milestones != nil {
		var got []string
		for _, m := range jetruntest.Milestones(evs) {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, want.Milestones) {
			t.Errorf("milestones %v, want %v", got, want.Milestones)
		}
	}
	if want.Progress != nil {
		var last *events.Progress
		for _, ev := range evs {
			if ev.Progress != nil {
				last = ev.Progress
			}
		}
		var wp events.Progress
		_ = json.Unmarshal(want.Progress, &wp)
		if last == nil || last.Fraction != wp.Fraction || last.Phase != wp.Phase || last.Message != wp.Message {
			t.Errorf("progress %+v, want %s", last, want.Progress)
		}
	}
	if want.Steps != nil {
		var got []string
		for _, ev := range evs {
			if st := ev.Step; st != nil {
				var u events.UsageTotals
				if st.Usage != nil {
					u = st.Usage.UsageTotals
				}
				got = append(got, fmt.Sprintf("%s@%d %s %+v", st.Name, st.Attempt, compactJSON(st.Output), u))
			}
		}
		var ws []string
		for _, st := range want.Steps {
			ws = append(ws, fmt.Sprintf("%s@%d %s %+v", st.Name, st.Attempt, compactJSON(st.Output), st.Usage))
		}
		if !slices.Equal(got, ws) {
			t.Errorf("steps\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(ws, "\n"))
		}
	}
	if want.Usage != nil {
		var got events.UsageTotals
		if row.Usage != nil {
			got = row.Usage.UsageTotals
		}
		if got != *want.Usage {
			t.Errorf("usage %+v, want %+v", got, *want.Usage)
		}
	}
}

func compactJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
