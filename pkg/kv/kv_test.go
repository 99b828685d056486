package kv_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns the rows of a fresh runtime and a client that dispatches
// runs no worker serves (their rows stay "starting" until cancelled).
func setup(t *testing.T) (*kv.Runs, *parent.Client) {
	t.Helper()
	env := jetruntest.NewEnv(t)
	client, err := parent.New(env.Runtime, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	return kv.New(env.Runtime), client
}

func dispatch(t *testing.T, c *parent.Client, req parent.Request) {
	t.Helper()
	req.Input = 1
	if _, err := c.Dispatch(t.Context(), req); err != nil {
		t.Fatalf("dispatch %s: %v", req.RunID, err)
	}
}

func TestGetAndListReadTheRows(t *testing.T) {
	t.Parallel()
	runs, c := setup(t)
	ctx := t.Context()
	dispatch(t, c, parent.Request{AgentType: "a", RunID: "boss", Detached: &events.Detached{}})
	dispatch(t, c, parent.Request{AgentType: "b", RunID: "kid-1", Parent: "boss", Depth: 1})
	dispatch(t, c, parent.Request{AgentType: "b", RunID: "kid-2", Parent: "boss", Depth: 1, ParentToolCallID: "call-7"})
	if _, err := c.Cancel(ctx, "kid-1", "not needed"); err != nil {
		t.Fatal(err)
	}

	row, err := runs.Get(ctx, "kid-2")
	if err != nil || row.ID != "kid-2" || row.Parent != "boss" || row.ParentToolCallID != "call-7" {
		t.Fatalf("Get(kid-2) = %+v, %v", row, err)
	}
	if _, err := runs.Get(ctx, "nobody"); !errors.Is(err, kv.ErrRunNotFound) {
		t.Fatalf("Get(nobody) = %v; want ErrRunNotFound", err)
	}
	if _, err := runs.Get(ctx, "a.b"); !errors.Is(err, events.ErrInvalidID) {
		t.Fatalf("Get(a.b) = %v; want events.ErrInvalidID", err)
	}

	for _, tc := range []struct {
		name string
		opts kv.ListOptions
		want []string
	}{
		{"every row, newest first", kv.ListOptions{}, []string{"kid-2", "kid-1", "boss"}},
		{"by status", kv.ListOptions{Statuses: []events.Status{events.StatusAborted}}, []string{"kid-1"}},
		{"by agent type", kv.ListOptions{AgentType: "a"}, []string{"boss"}},
		{"by parent", kv.ListOptions{Parent: "boss"}, []string{"kid-2", "kid-1"}},
		{"by tool call", kv.ListOptions{ParentToolCallID: "call-7"}, []string{"kid-2"}},
		{"none", kv.ListOptions{AgentType: "b", Statuses: []events.Status{events.StatusCompleted}}, []string{}},
	} {
		rows, err := runs.List(ctx, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := []string{}
		for _, r := range rows {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}

// collect ranges over a watch until stop says so, and returns what it saw.
func collect(t *testing.T, seq func(func(kv.Change, error) bool), stop func(kv.Change) bool) []kv.Change {
	t.Helper()
	var out []kv.Change
	for c, err := range seq {
		if err != nil {
			t.Fatalf("watch: %v (saw %v)", err, out)
		}
		out = append(out, c)
		if stop(c) {
			break
		}
	}
	return out
}

func TestWatchYieldsTheRowsThenTheirChanges(t *testing.T) {
	t.Parallel()
	runs, c := setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dispatch(t, c, parent.Request{AgentType: "a", RunID: "there"})

	var removedAt uint64
	seen := collect(t, runs.Watch(ctx, kv.WatchOptions{}), func(ch kv.Change) bool {
		switch {
		case ch.Loaded:
			dispatch(t, c, parent.Request{AgentType: "a", RunID: "later"})
		case ch.ID == "later" && ch.Run != nil:
			if _, err := c.Clear(ctx, parent.ClearFilter{All: true}); err != nil {
				t.Fatal(err)
			}
		case ch.ID == "later" && ch.Run == nil:
			removedAt = ch.Revision
			return true
		}
		return false
	})
	if len(seen) < 3 || seen[0].ID != "there" || seen[0].Run == nil || !seen[1].Loaded || seen[2].ID != "later" || removedAt == 0 {
		t.Fatalf("watch saw %+v; want there, loaded, later, ..., later removed", seen)
	}
	for i := 3; i < len(seen); i++ {
		if seen[i].Revision <= seen[i-1].Revision {
			t.Fatalf("revisions went from %d to %d", seen[i-1].Revision, seen[i].Revision)
		}
	}

	// One run's row: its state, then its cancel; nothing of "other".
	dispatch(t, c, parent.Request{AgentType: "a", RunID: "one"})
	dispatch(t, c, parent.Request{AgentType: "a", RunID: "other"})
	seen = collect(t, runs.Watch(ctx, kv.WatchOptions{ID: "one"}), func(ch kv.Change) bool {
		if ch.Loaded {
			for _, id := range []string{"other", "one"} {
				if _, err := c.Cancel(ctx, id, ""); err != nil {
					t.Fatal(err)
				}
			}
		}
		return !ch.Loaded && ch.Run != nil && ch.Run.Status == events.StatusAborted
	})
	if len(seen) != 3 || seen[0].ID != "one" || seen[0].Run.Status != events.StatusStarting || !seen[1].Loaded || seen[2].ID != "one" {
		t.Fatalf("watch of one run saw %+v; want one starting, loaded, one aborted", seen)
	}

	// Updates only: no current state, no Loaded marker, the first change
	// is a run dispatched after the watch began.
	first := make(chan kv.Change, 1)
	go func() {
		for ch, err := range runs.Watch(ctx, kv.WatchOptions{UpdatesOnly: true}) {
			if err != nil {
				t.Errorf("watch updates only: %v", err)
			}
			first <- ch
			return
		}
	}()
	var got kv.Change
	for i := 0; got.ID == "" && !got.Loaded; i++ { // until the watch, started meanwhile, sees one
		dispatch(t, c, parent.Request{AgentType: "a", RunID: fmt.Sprintf("new-%d", i)})
		select {
		case got = <-first:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the watch of updates saw nothing")
		}
	}
	if got.Loaded || !strings.HasPrefix(got.ID, "new-") {
		t.Fatalf("watch of updates only began with %+v; want a run dispatched after it", got)
	}
	if _, err := collectErr(runs.Watch(ctx, kv.WatchOptions{ID: "a>b"})); !errors.Is(err, events.ErrInvalidID) {
		t.Fatalf("watch of a bad id: %v; want events.ErrInvalidID", err)
	}
}

// collectErr ranges a watch to its first error.
func collectErr(seq func(func(kv.Change, error) bool)) (*jetruntype.Run, error) {
	for c, err := range seq {
		if err != nil {
			return nil, err
		}
		return c.Run, nil
	}
	return nil, nil
}
