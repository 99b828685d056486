package subagent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/subagent"
	"github.com/jetrun/jetrun/pkg/events"
)

// A spec is checked against the pool, every problem named at once; an
// unknown tool's message lists the pool.
func TestParseDynamic(t *testing.T) {
	pool := []string{"search", "fetch"}
	for _, tc := range []struct {
		args string
		want []string // substrings of the error; none: valid
	}{
		{`{"spec":{"name":"a","prompt":"p","tools":["search"]},"objective":"o"}`, nil},
		{`{"spec":{"name":"a","prompt":"p","tools":["x","fetch","y"]},"objective":"o"}`,
			[]string{`unknown tool "x": choose from the pool [search, fetch]`, `unknown tool "y"`}},
		{`{"spec":{"prompt":"p","responseSchema":{"type":3}},"objective":""}`,
			[]string{"objective is required", "spec.name is required", "spec.responseSchema"}},
		{`{"objective":"o"}`, []string{"spec is required"}},
		{`[1]`, []string{"not a JSON object"}},
	} {
		in, err := subagent.ParseDynamic(json.RawMessage(tc.args), pool)
		if len(tc.want) == 0 {
			if err != nil || in.Spec == nil || in.Objective != "o" {
				t.Errorf("%s: %+v, %v", tc.args, in, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v, want %q", tc.args, err, w)
			}
		}
	}
}

// A tool name maps to its delegate: a named delegate by its (overridden)
// name only, else task_<type> for a type the registry lists.
func TestDelegateOf(t *testing.T) {
	agents := []registry.Agent{{AgentType: "a"}, {AgentType: "b"}}
	if d, ok := subagent.DelegateOf("task_b", agents, nil); !ok || d.AgentType != "b" {
		t.Errorf("task_b: %+v %v", d, ok)
	}
	if _, ok := subagent.DelegateOf("task_c", agents, nil); ok {
		t.Error("task_c of no listed type")
	}
	named := []subagent.Delegate{{AgentType: "a", Name: "ask_a", Session: "s"}}
	if d, ok := subagent.DelegateOf("ask_a", agents, named); !ok || d.AgentType != "a" || d.Session != "s" {
		t.Errorf("ask_a: %+v %v", d, ok)
	}
	if _, ok := subagent.DelegateOf("task_a", agents, named); ok {
		t.Error("task_a answered though a delegate renamed it")
	}
}

// Variable steps: in stored order, the last assignment of a key wins;
// other steps, failed steps and malformed ones are ignored.
func TestChanges(t *testing.T) {
	steps := []events.Step{
		{Name: subagent.VariableStep(1, 1), Output: json.RawMessage(`{"key":"k","value":1}`)},
		{Name: "plan", Output: json.RawMessage(`{"key":"x","value":1}`)},
		{Name: subagent.VariableStep(1, 2), Output: json.RawMessage(`{"key":"j","value":"a"}`)},
		{Name: subagent.VariableStep(2, 1), Output: json.RawMessage(`{"key":"k","value":2}`)},
		{Name: subagent.VariableStep(2, 2), Error: "boom"},
		{Name: subagent.VariableStep(2, 3), Output: json.RawMessage(`"bad"`)},
	}
	vars, keys := subagent.Changes(steps)
	if strings.Join(keys, ",") != "k,j" || string(vars["k"]) != "2" || string(vars["j"]) != `"a"` || len(vars) != 2 {
		t.Errorf("vars %v keys %v", vars, keys)
	}
}

// Session ids are valid run ids, one per agent type and key.
func TestSessionID(t *testing.T) {
	a, b, c := subagent.SessionID("t", "k"), subagent.SessionID("t", "k2"), subagent.SessionID("t2", "k")
	for _, id := range []string{a, b, c} {
		if err := events.ValidateToken("run id", id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if a == b || a == c || a != subagent.SessionID("t", "k") {
		t.Errorf("ids %s %s %s", a, b, c)
	}
}
