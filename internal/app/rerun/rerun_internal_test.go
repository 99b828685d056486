package rerun

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// Steps only one run stored are only-a / only-b; outputs compare as JSON
// values; a step given back shows where from and spent nothing.
func TestCompareVerdicts(t *testing.T) {
	ra := &jetruntype.Run{ID: "a", Output: json.RawMessage(`{"x":1,"y":2}`), Usage: &jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{CostMicros: 30}}}
	rb := &jetruntype.Run{ID: "b", Output: json.RawMessage(`{"y":2, "x":1}`), Usage: &jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{CostMicros: 10}}}
	u := &events.Usage{UsageTotals: events.UsageTotals{CostMicros: 10}}
	sa := []events.Step{
		{Name: "one", Output: json.RawMessage(`[1, 2]`), Usage: u},
		{Name: "two", Output: json.RawMessage(`"x"`), Usage: u},
		{Name: "gone", Output: json.RawMessage(`1`), Usage: u},
	}
	sb := []events.Step{
		{Name: "one", Output: json.RawMessage(`[1,2]`), GivenFrom: "a"},
		{Name: "two", Error: "refused", Usage: u},
		{Name: "new", Output: json.RawMessage(`2`)},
	}
	d := compare(ra, sa, rb, sb)
	var got []string
	for _, s := range d.Steps {
		got = append(got, s.Name+"="+s.Verdict)
	}
	want := []string{"one=equal", "two=changed", "gone=only-a", "new=only-b"}
	if !reflect.DeepEqual(got, want) || d.Equal != 1 || d.Changed != 1 || !d.OutputEqual {
		t.Fatalf("verdicts %v equal %d changed %d outputEqual %v", got, d.Equal, d.Changed, d.OutputEqual)
	}
	if d.Steps[0].B.Given != "a" || d.Steps[0].B.Usage.CostMicros != 0 || d.Steps[0].A.Output != nil {
		t.Errorf("an equal step given back: %+v / %+v", d.Steps[0].A, d.Steps[0].B)
	}
	if string(d.Steps[1].A.Output) != `"x"` || d.Steps[1].B.Error != "refused" {
		t.Errorf("a changed step: %+v / %+v", d.Steps[1].A, d.Steps[1].B)
	}
	if d.Totals.Delta.CostMicros != -20 {
		t.Errorf("totals %+v", d.Totals)
	}
}

// A batch's set paths land in the input (objects made on the way) or as
// step overrides; an input that is not an object cannot take a field.
func TestRerunRequestAppliesSetPaths(t *testing.T) {
	req := BatchRequest{FromStep: "s2", Set: map[string]json.RawMessage{
		"input.model": json.RawMessage(`"m2"`), "input.opts.t": json.RawMessage(`0.5`), "steps.s1": json.RawMessage(`"given"`)}}
	rr, err := rerunRequest(req, &jetruntype.Run{Input: json.RawMessage(`{"model":"m1","keep":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(rr.Input)
	if string(in) != `{"keep":true,"model":"m2","opts":{"t":0.5}}` || string(rr.Steps["s1"].(json.RawMessage)) != `"given"` {
		t.Errorf("input %s, steps %v", in, rr.Steps)
	}
	if _, err := rerunRequest(req, &jetruntype.Run{Input: json.RawMessage(`[1]`)}); err == nil {
		t.Error("a field set on an array input")
	}
	if _, err := rerunRequest(req, &jetruntype.Run{Input: json.RawMessage(`{"opts":3}`)}); err == nil {
		t.Error("a field set under a number")
	}
}

// A batch budget runs out: what is left is passed on, and a bound spent
// is never "no bound".
func TestBatchBudgetArithmetic(t *testing.T) {
	for _, c := range []struct{ bound, n, want int64 }{{0, 50, 0}, {100, 30, 70}, {100, 100, -1}, {100, 130, -1}} {
		if got := less(c.bound, c.n); got != c.want {
			t.Errorf("less(%d, %d) = %d, want %d", c.bound, c.n, got, c.want)
		}
	}
	if !spent(&events.TreeBudget{CostMicros: -1}) || spent(&events.TreeBudget{CostMicros: 1}) || spent(&events.TreeBudget{Tokens: 5, CostMicros: 0}) {
		t.Error("spent")
	}
	bad := []BatchRequest{{FromStep: "s"}, {AgentType: "a"}, {AgentType: "a", FromStep: "s", MaxRuns: MaxRuns + 1},
		{AgentType: "a", FromStep: "s", Statuses: []events.Status{events.StatusRunning}},
		{AgentType: "a", FromStep: "s", Set: map[string]json.RawMessage{"output.x": json.RawMessage(`1`)}},
		{AgentType: "a", FromStep: "s", Budget: &events.TreeBudget{Runs: 3}}}
	for _, r := range bad {
		if err := r.validate(); err == nil {
			t.Errorf("%+v was accepted", r)
		}
	}
}
