package e2e_test

import (
	"context"
	"errors"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"testing"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/parent"
)

// A service logged in as viewer, with the shipped nats.conf, reads run rows
// through pkg/kv: it opens the runtime the parent created, gets a row, is
// told a guessed id has none, lists the rows, and watches them, seeing a
// run dispatched after the watch began. Nothing it does is refused.
func TestRolesViewerReadsRowsThroughKV(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The parent creates the streams and buckets, and dispatches runs no
	// worker serves: their rows stay "starting".
	pc, err := roleConn(url, "parent", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	prt, err := jetrun.Open(ctx, pc, jetrun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := parent.New(prt, parent.Config{AllowUnknownAgentTypes: true})
	if err != nil {
		t.Fatal(err)
	}
	dispatch := func(id string) {
		t.Helper()
		if _, err := client.Dispatch(ctx, parent.Request{AgentType: "viewed", RunID: id, Input: 1,
			Detached: &events.Detached{}}); err != nil {
			t.Fatal(err)
		}
	}
	dispatch("kv-first")

	refusals := make(chan error, 16)
	vc, err := roleConn(url, "viewer", refusals)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	vrt, err := jetrun.Open(ctx, vc, jetrun.Config{})
	if err != nil {
		t.Fatalf("the viewer cannot open the runtime: %v", err)
	}
	runs := kv.New(vrt)

	row, err := runs.Get(ctx, "kv-first")
	if err != nil || row.ID != "kv-first" || row.AgentType != "viewed" || row.Status != events.StatusStarting {
		t.Fatalf("Get(kv-first) = %+v, %v", row, err)
	}
	if _, err := runs.Get(ctx, "kv-guessed"); !errors.Is(err, kv.ErrRunNotFound) {
		t.Fatalf("Get(kv-guessed) = %v; want ErrRunNotFound", err)
	}
	rows, err := runs.List(ctx, kv.ListOptions{Statuses: []events.Status{events.StatusStarting}, AgentType: "viewed"})
	if err != nil || len(rows) != 1 || rows[0].ID != "kv-first" {
		t.Fatalf("List = %v, %v", ids(rows), err)
	}

	var seen []string
	loaded := false
	for c, err := range runs.Watch(ctx, kv.WatchOptions{}) {
		if err != nil {
			t.Fatalf("watch: %v (seen %v)", err, seen)
		}
		if c.Loaded {
			loaded = true
			dispatch("kv-second") // after the watch began
			continue
		}
		if c.Run == nil {
			t.Fatalf("watch: %s removed", c.ID)
		}
		seen = append(seen, c.ID+"/"+string(c.Run.Status))
		if loaded && c.ID == "kv-second" {
			break
		}
	}
	if len(seen) < 2 || seen[0] != "kv-first/starting" || seen[len(seen)-1] != "kv-second/starting" {
		t.Fatalf("watch saw %v; want kv-first, then kv-second once dispatched", seen)
	}
	_ = vc.Flush()
	select {
	case err := <-refusals:
		t.Fatalf("the server refused the viewer: %v", err)
	default:
	}
}

func ids(rows []*jetruntype.Run) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}
