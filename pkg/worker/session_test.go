package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// chat is a sub-agent with a memory: it stores a step "heard" and answers
// with what its session's earlier turns were asked and heard, in order.
func chat(ctx context.Context, run *worker.Run) (worker.Result, error) {
	turns, err := run.History(ctx)
	if err != nil {
		return worker.Result{}, err
	}
	var in worker.SubAgentInput
	if err := json.Unmarshal(run.Input(), &in); err != nil {
		return worker.Result{}, err
	}
	if _, err := run.Step(ctx, "heard", func(context.Context) (any, error) { return "heard " + in.Objective, nil }); err != nil {
		return worker.Result{}, err
	}
	var seen []string
	for _, t := range turns {
		var tin worker.SubAgentInput
		_ = json.Unmarshal(t.Input, &tin)
		var steps []string
		for _, st := range t.Steps {
			steps = append(steps, st.Name+"="+string(st.Output))
		}
		seen = append(seen, fmt.Sprintf("%s:%s:%s[%s]", tin.Objective, t.Status, t.Output, strings.Join(steps, ",")))
	}
	return worker.Result{Output: strings.Join(seen, " | ")}, nil
}

// Persistent sessions: runs of one agent type under one session key see
// the session's earlier turns (input, output, steps) as their history, in
// order, whichever worker ran them; another key, or another agent type
// under the same key, starts empty; a delegate with a session is a
// persistent sub-agent.
func TestSubAgentSessionHistory(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	register := func(w *worker.Worker) {
		w.HandleFunc("chat", chat)
		w.HandleFunc("chat2", chat)
		w.HandleFunc("orchestrator", orchestrator(worker.SubAgents{Delegates: []worker.Delegate{{AgentType: "chat", Session: "memo"}}}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	turn := func(agentType, id, session, objective string) string {
		t.Helper()
		res, err := env.Client.Run(ctx, parent.Request{AgentType: agentType, RunID: id, Session: session,
			Input: worker.SubAgentInput{Objective: objective}})
		if err != nil {
			t.Fatalf("turn %s: %v", id, err)
		}
		var out string
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	first := env.StartWorker(t, worker.Config{}, register)
	if got := turn("chat", "t1", "s1", "a"); got != "" {
		t.Fatalf("first turn saw %q", got)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	env.StartWorker(t, worker.Config{}, register) // another worker takes the next turns
	if got, want := turn("chat", "t2", "s1", "b"), `a:completed:""[heard="heard a"]`; got != want {
		t.Fatalf("second turn saw %q, want %q", got, want)
	}
	if got := turn("chat", "other", "s2", "x"); got != "" {
		t.Errorf("another session saw %q", got)
	}
	if got := turn("chat2", "other-type", "s1", "y"); got != "" {
		t.Errorf("another agent type under the same key saw %q", got)
	}
	if got := turn("chat", "no-session", "", "z"); got != "" {
		t.Errorf("a run without a session saw %q", got)
	}
	want := `a:completed:""[heard="heard a"] | b:completed:"a:completed:\"\"[heard=\"heard a\"]"[heard="heard b"]`
	if got := turn("chat", "t3", "s1", "c"); got != want {
		t.Errorf("third turn saw %q, want %q", got, want)
	}

	out := runOrchestration(t, env, "memo-1", []toolCall{
		{ID: "m1", Tool: "task_chat", Args: json.RawMessage(`{"objective":"remember 7"}`)},
		{ID: "m2", Tool: "task_chat", Args: json.RawMessage(`{"objective":"what was it"}`)},
	}, nil)
	if !slices.Equal(out.Answers, []string{"", `remember 7:completed:""[heard="heard remember 7"]`}) {
		t.Errorf("persistent delegate answered %q", out.Answers)
	}
}
