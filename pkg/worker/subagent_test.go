package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// toolCall is one tool call a test's scripted model makes.
type toolCall struct {
	ID   string          `json:"id"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

// orchestration is what the scripted orchestrator returns: the tools it
// was offered, what each call answered, its variables at the end.
type orchestration struct {
	Tools     []string                   `json:"tools"`
	Answers   []string                   `json:"answers"`
	Variables map[string]json.RawMessage `json:"variables"`
}

// orchestrator is a scripted model's loop: it lists the sub-agent tools of
// subs (OpenAI format), makes the tool calls of its input's "calls" with
// RunSubAgent, and returns an orchestration.
func orchestrator(subs worker.SubAgents) worker.HandlerFunc {
	return func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in struct{ Calls []toolCall }
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, err
		}
		var out orchestration
		tools, err := run.SubAgentTools(ctx, subs, "openai")
		if err != nil {
			return worker.Result{}, err
		}
		raw, _ := json.Marshal(tools)
		var defs []struct {
			Function struct {
				Name       string
				Parameters struct{ Required []string }
			}
		}
		if err := json.Unmarshal(raw, &defs); err != nil {
			return worker.Result{}, err
		}
		for _, d := range defs {
			out.Tools = append(out.Tools, d.Function.Name+"("+strings.Join(d.Function.Parameters.Required, ",")+")")
		}
		for _, c := range in.Calls {
			answer, err := run.RunSubAgent(ctx, subs, c.ID, c.Tool, c.Args)
			if err != nil {
				return worker.Result{}, err
			}
			out.Answers = append(out.Answers, answer)
		}
		if out.Variables, err = run.Variables(ctx); err != nil {
			return worker.Result{}, err
		}
		return worker.Result{Output: out}, nil
	}
}

// researcher answers its objective and context, and sets the variable
// "found" (reading "seen", a variable of its caller).
func researcher(ctx context.Context, run *worker.Run) (worker.Result, error) {
	var in worker.SubAgentInput
	if err := json.Unmarshal(run.Input(), &in); err != nil {
		return worker.Result{}, err
	}
	vars, err := run.Variables(ctx)
	if err != nil {
		return worker.Result{}, err
	}
	if err := run.SetVariable(ctx, "found", in.Objective+" after "+string(vars["seen"])); err != nil {
		return worker.Result{}, err
	}
	return worker.Result{Output: "researched " + in.Objective + " (" + in.Context + ")"}, nil
}

func runOrchestration(t *testing.T, env *jetruntest.Env, id string, calls []toolCall, input map[string]any) orchestration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if input == nil {
		input = map[string]any{}
	}
	input["calls"] = calls
	res, err := env.Client.Run(ctx, parent.Request{AgentType: "orchestrator", RunID: id, Input: input})
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	var out orchestration
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("decode %s: %v", res.Output, err)
	}
	return out
}

// Delegate tools: one task_<agent> per agent type the registry lists
// (objective required, context optional), or the delegates named, with
// their name overridden; a call runs the agent type as a child of the
// caller whose input carries the objective and context, and returns its
// answer; what the model can fix comes back as a text; the variable the
// child set is the caller's once it completed.
func TestSubAgentDelegateTools(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	named := worker.SubAgents{Delegates: []worker.Delegate{{AgentType: "researcher", Name: "ask_researcher", Description: "Ask the researcher."}}}
	env.StartWorker(t, worker.Config{Concurrency: 4}, func(w *worker.Worker) {
		w.HandleWith("researcher", worker.HandlerFunc(researcher), worker.AgentInfo{Description: "Researches a topic."})
		w.HandleFunc("orchestrator", orchestrator(worker.SubAgents{}))
		w.HandleFunc("named", orchestrator(named))
	})

	out := runOrchestration(t, env, "orch-1", []toolCall{
		{ID: "call-1", Tool: "task_researcher", Args: json.RawMessage(`{"objective":"tides","context":"for sailors"}`)},
		{ID: "call-2", Tool: "task_researcher", Args: json.RawMessage(`{"context":"no objective"}`)},
		{ID: "call-3", Tool: "task_nobody", Args: json.RawMessage(`{"objective":"x"}`)},
	}, map[string]any{"variables": map[string]any{"seen": "moon"}})

	for _, want := range []string{"task_named(objective)", "task_orchestrator(objective)", "task_researcher(objective)"} {
		if !slices.Contains(out.Tools, want) {
			t.Errorf("tools %v lack %s", out.Tools, want)
		}
	}
	if got := out.Answers[0]; got != "researched tides (for sailors)" {
		t.Errorf("answer of task_researcher: %q", got)
	}
	if got := out.Answers[1]; !strings.Contains(got, "objective is required") {
		t.Errorf("answer without an objective: %q", got)
	}
	if got := out.Answers[2]; !strings.Contains(got, `unknown tool "task_nobody"`) || !strings.Contains(got, "task_researcher") {
		t.Errorf("answer of an unknown tool: %q", got)
	}
	if got := string(out.Variables["found"]); got != `"tides after \"moon\""` {
		t.Errorf("variable found: %s (variables %v)", got, out.Variables)
	}

	child, _, err := env.Store.Get(context.Background(), parent.RunID("orch-1", "call-1"))
	if err != nil {
		t.Fatal(err)
	}
	var in worker.SubAgentInput
	if err := json.Unmarshal(child.Input, &in); err != nil {
		t.Fatal(err)
	}
	if child.Parent != "orch-1" || child.AgentType != "researcher" || in.Objective != "tides" || in.Context != "for sailors" || string(in.Variables["seen"]) != `"moon"` {
		t.Errorf("child row: parent %q type %q input %s", child.Parent, child.AgentType, child.Input)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := env.Client.Run(ctx, parent.Request{AgentType: "named", RunID: "named-1", Input: map[string]any{"calls": []toolCall{
		{ID: "c1", Tool: "ask_researcher", Args: json.RawMessage(`{"objective":"stars"}`)},
		{ID: "c2", Tool: "task_researcher", Args: json.RawMessage(`{"objective":"stars"}`)},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var named1 orchestration
	if err := json.Unmarshal(res.Output, &named1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(named1.Tools, []string{"ask_researcher(objective)"}) {
		t.Errorf("named tools %v", named1.Tools)
	}
	if named1.Answers[0] != "researched stars ()" || !strings.Contains(named1.Answers[1], "[ask_researcher]") {
		t.Errorf("named answers %q", named1.Answers)
	}
}

// generic is the generic agent type that runs dynamic agents: it answers
// with its spec's name, tools and objective (or a wrong shape when its
// prompt says "answer badly"), and reports what it was offered and what
// its own create_and_run_agent answered.
func generic(subs worker.SubAgents) worker.HandlerFunc {
	return func(ctx context.Context, run *worker.Run) (worker.Result, error) {
		var in worker.SubAgentInput
		if err := json.Unmarshal(run.Input(), &in); err != nil {
			return worker.Result{}, err
		}
		tools, err := run.SubAgentTools(ctx, subs, "anthropic")
		if err != nil {
			return worker.Result{}, err
		}
		raw, _ := json.Marshal(tools)
		nested, err := run.RunSubAgent(ctx, subs, "nested", "create_and_run_agent",
			json.RawMessage(`{"spec":{"name":"grandchild","prompt":"p"},"objective":"o"}`))
		if err != nil {
			return worker.Result{}, err
		}
		if in.Spec.Prompt == "answer badly" {
			return worker.Result{Output: map[string]int{"wrong": 1}}, nil
		}
		return worker.Result{Output: map[string]any{
			"answer":  in.Spec.Name + " did " + in.Objective + " with " + strings.Join(in.Spec.Tools, "+"),
			"offered": strings.Contains(string(raw), "create_and_run_agent"), "nested": nested,
		}}, nil
	}
}

// Dynamic agents: create_and_run_agent runs a spec as a child of the
// generic agent type; a tool outside the pool is answered as a text naming
// the pool; an answer that misses the spec's response schema is answered
// as a text; a dynamic agent is not offered create_and_run_agent and
// calling it is answered as a text.
func TestSubAgentDynamicAgents(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	subs := worker.SubAgents{Delegates: []worker.Delegate{{AgentType: "researcher"}}, DynamicType: "generic", Pool: []string{"search", "fetch"}}
	env.StartWorker(t, worker.Config{Concurrency: 4}, func(w *worker.Worker) {
		w.HandleFunc("researcher", researcher)
		w.HandleFunc("generic", generic(subs))
		w.HandleFunc("orchestrator", orchestrator(subs))
	})
	schema := `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`
	out := runOrchestration(t, env, "dyn-1", []toolCall{
		{ID: "c1", Tool: "create_and_run_agent", Args: json.RawMessage(`{"spec":{"name":"scout","prompt":"find","tools":["search","fetch"],"responseSchema":` + schema + `},"objective":"map the bay"}`)},
		{ID: "c2", Tool: "create_and_run_agent", Args: json.RawMessage(`{"spec":{"name":"scout","prompt":"find","tools":["search","teleport"]},"objective":"x"}`)},
		{ID: "c3", Tool: "create_and_run_agent", Args: json.RawMessage(`{"spec":{"name":"sloppy","prompt":"answer badly","responseSchema":` + schema + `},"objective":"y"}`)},
	}, nil)

	if !slices.Equal(out.Tools, []string{"task_researcher(objective)", "create_and_run_agent(spec,objective)"}) {
		t.Errorf("tools %v", out.Tools)
	}
	var first struct {
		Answer  string
		Offered bool
		Nested  string
	}
	if err := json.Unmarshal([]byte(out.Answers[0]), &first); err != nil {
		t.Fatalf("first answer %q: %v", out.Answers[0], err)
	}
	if first.Answer != "scout did map the bay with search+fetch" || first.Offered || !strings.Contains(first.Nested, "cannot create dynamic agents") {
		t.Errorf("dynamic agent's answer %+v", first)
	}
	if got := out.Answers[1]; !strings.Contains(got, `unknown tool "teleport"`) || !strings.Contains(got, "[search, fetch]") {
		t.Errorf("answer of a spec with an unknown tool: %q", got)
	}
	if got := out.Answers[2]; !strings.Contains(got, "does not match its response schema") {
		t.Errorf("answer that misses the schema: %q", got)
	}
	// The refused spec started no run; the dynamic agent started none.
	ctx := context.Background()
	if _, _, err := env.Store.Get(ctx, parent.RunID("dyn-1", "c2")); err == nil {
		t.Errorf("a refused spec started a run")
	}
	if _, _, err := env.Store.Get(ctx, parent.RunID(parent.RunID("dyn-1", "c1"), "nested")); err == nil {
		t.Errorf("a dynamic agent started a dynamic agent")
	}
	row, _, err := env.Store.Get(ctx, parent.RunID("dyn-1", "c1"))
	if err != nil || row.AgentType != "generic" || row.Parent != "dyn-1" {
		t.Fatalf("dynamic child row %+v, %v", row, err)
	}
}
