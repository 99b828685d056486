package mcpserver_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// taskOnWire is a task as tasks/get answers it, in either form.
type taskOnWire struct {
	TaskID        string                     `json:"taskId"`
	Status        string                     `json:"status"`
	StatusMessage string                     `json:"statusMessage"`
	TTLMs         *int64                     `json:"ttlMs"`
	TTL           *int64                     `json:"ttl"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
}

func (c *rawSession) task(ctx context.Context, method string, params map[string]any) taskOnWire {
	c.t.Helper()
	raw := c.call(ctx, method, params)
	var tw taskOnWire
	if err := json.Unmarshal(raw, &tw); err != nil {
		c.t.Fatalf("%s: %s: %v", method, raw, err)
	}
	if tw.TaskID == "" { // CreateTaskResult of the 2025-11-25 form: {task}
		var created struct{ Task taskOnWire }
		if err := json.Unmarshal(raw, &created); err != nil || created.Task.TaskID == "" {
			c.t.Fatalf("%s: %s; want a task", method, raw)
		}
		tw = created.Task
	}
	return tw
}

// startTask makes a task-augmented tools/call in the extension's form.
func (c *rawSession) startTask(ctx context.Context, tool string) taskOnWire {
	c.t.Helper()
	return c.task(ctx, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{}, "_meta": tasksCaps})
}

// startLegacyTask makes a tools/call with params.task (2025-11-25).
func (c *rawSession) startLegacyTask(ctx context.Context, tool string, args any) taskOnWire {
	c.t.Helper()
	return c.task(ctx, "tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{}})
}

// waitListed waits until tools/list lists every one of names.
func (c *rawSession) waitListed(ctx context.Context, names ...string) {
	c.t.Helper()
	natstest.Eventually(c.t, 30*time.Second, func() bool {
		raw := string(c.call(ctx, "tools/list", map[string]any{}))
		for _, n := range names {
			if !strings.Contains(raw, `"name":"`+n+`"`) {
				return false
			}
		}
		return true
	}, "tools/list lacks one of %v", names)
}

// A task's inputRequests list only what a client can answer: a run waiting
// for its child run is working (no client answers a child), and a run
// waiting for its call's reply asks for that reply only, not for a signal
// named after the call.
func TestTaskInputRequiredListsOnlyWhatAClientCanAnswer(t *testing.T) {
	f := newFixture(t)
	f.env.StartWorker(t, worker.Config{ID: "w2"}, func(w *worker.Worker) {
		w.HandleFunc("nest", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			_, err := run.RunChild(ctx, worker.ChildRequest{AgentType: "block", Input: map[string]any{}})
			return worker.Result{}, err
		})
		w.HandleFunc("ask", func(ctx context.Context, run *worker.Run) (worker.Result, error) {
			out, err := run.Call(ctx, "ask-user", map[string]string{"q": "which?"})
			return worker.Result{Output: out}, err
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openRawSession(t, ctx, f.url)
	c.waitListed(ctx, "nest", "ask")

	nest := c.startTask(ctx, "nest")
	row := jetruntest.WaitRow(t, f.env.Store, nest.TaskID, 30*time.Second, func(r *model.Row) bool {
		return strings.HasPrefix(r.WaitingFor, "run:")
	})
	child := strings.TrimPrefix(row.WaitingFor, "run:")
	got := c.task(ctx, "tasks/get", map[string]any{"taskId": nest.TaskID, "_meta": tasksCaps})
	if got.Status != mcpserver.TaskWorking || len(got.InputRequests) != 0 || got.StatusMessage != "waiting for run "+child {
		t.Errorf("task of a run waiting for its child: %s %q %v; want working, no inputRequests, the child named",
			got.Status, got.StatusMessage, slices.Sorted(maps.Keys(got.InputRequests)))
	}

	ask := c.startTask(ctx, "ask")
	jetruntest.WaitRow(t, f.env.Store, ask.TaskID, 30*time.Second, func(r *model.Row) bool { return r.WaitingFor == "call:ask-user" })
	got = c.task(ctx, "tasks/get", map[string]any{"taskId": ask.TaskID, "_meta": tasksCaps})
	if keys := slices.Sorted(maps.Keys(got.InputRequests)); got.Status != mcpserver.TaskInputRequired ||
		!slices.Equal(keys, []string{"call:1"}) || !strings.Contains(string(got.InputRequests["call:1"]), `"ask-user"`) {
		t.Errorf("task of a run waiting for its call's reply: %s %v; want input_required with call:1 alone", got.Status, keys)
	}
}

// A task's ttl is the retention of its run: Config.Retention while it
// runs, and the retention plus the run's duration once it ended (retention
// counts from the end), in both forms.
func TestTaskTTLIsTheRetentionOfItsRun(t *testing.T) {
	const retention = 90 * time.Minute
	f := newFixtureWith(t, mcpserver.Config{Retention: retention})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := openRawSession(t, ctx, f.url)
	created := c.startLegacyTask(ctx, "steps", map[string]int{"steps": 2})
	if created.TTL == nil || *created.TTL != retention.Milliseconds() {
		t.Fatalf("created task %+v; want ttl %d", created, retention.Milliseconds())
	}
	live := c.task(ctx, "tasks/get", map[string]any{"taskId": created.TaskID, "_meta": tasksCaps})
	if live.TTLMs == nil || *live.TTLMs != retention.Milliseconds() {
		t.Fatalf("live task %+v; want ttlMs %d", live, retention.Milliseconds())
	}
	if _, err := f.env.Client.Signal(ctx, created.TaskID, "go", nil); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, f.env.Store, created.TaskID, 30*time.Second, jetruntest.Final)
	want := (retention + row.FinishedAt.Sub(row.CreatedAt)).Milliseconds()
	ended := c.task(ctx, "tasks/get", map[string]any{"taskId": created.TaskID, "_meta": tasksCaps})
	legacyEnded := c.task(ctx, "tasks/get", map[string]any{"taskId": created.TaskID})
	if ended.TTLMs == nil || *ended.TTLMs != want || legacyEnded.TTL == nil || *legacyEnded.TTL != want {
		t.Fatalf("ended task %+v, in the 2025-11-25 form %+v; want ttl %d (the retention from its end)", ended, legacyEnded, want)
	}
}

// tasks/list lists every task, whichever session and parent-worker created
// it, newest first, a page at a time: not the runs of plain tools/calls,
// nor runs dispatched otherwise.
func TestTasksListListsEveryTaskAcrossReplicas(t *testing.T) {
	f := newFixtureWith(t, mcpserver.Config{TasksPerPage: 2})
	other := f.serve(t, mcpserver.Config{TasksPerPage: 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := openRawSession(t, ctx, f.url), openRawSession(t, ctx, other)
	want := []string{
		a.startLegacyTask(ctx, "steps", map[string]int{"steps": 1}).TaskID,
		a.startTask(ctx, "fail").TaskID,
		b.startTask(ctx, "block").TaskID,
	}
	if res, _ := a.callErr(ctx, "tools/call", map[string]any{"name": "fail", "arguments": map[string]any{}}); !strings.Contains(string(res), `"isError":true`) {
		t.Fatalf("a plain tools/call: %s", res)
	}
	if _, err := f.env.Client.Dispatch(ctx, parent.Request{AgentType: "fail", RunID: "not-a-task", Input: map[string]any{},
		Detached: &events.Detached{}}); err != nil {
		t.Fatal(err)
	}

	c := openRawSession(t, ctx, other) // created no task
	var listed []string
	cursor := ""
	for page := 1; ; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var res struct {
			Tasks      []taskOnWire
			NextCursor string
		}
		if raw := c.call(ctx, "tasks/list", params); json.Unmarshal(raw, &res) != nil || page > 3 ||
			len(res.Tasks) != 2 && res.NextCursor != "" {
			t.Fatalf("tasks/list page %d: %s; want two tasks a page and a cursor to the next", page, raw)
		}
		for _, tw := range res.Tasks {
			listed = append(listed, tw.TaskID)
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	slices.Reverse(want) // newest first
	if !slices.Equal(listed, want) {
		t.Fatalf("tasks/list listed %v; want %v, newest first", listed, want)
	}
	if _, rerr := c.callErr(ctx, "tasks/list", map[string]any{"cursor": "not-a-cursor"}); !strings.Contains(string(rerr), "-32602") {
		t.Errorf("tasks/list with a bad cursor: %s; want invalid params", rerr)
	}
}
