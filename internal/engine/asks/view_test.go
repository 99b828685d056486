package asks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

// The index lists asks newest first, page by page through its cursors,
// each once; totals count what the filter selects; each ask's JSON is the
// ask as it is now (compact), a change moves it between lists, a removal
// drops it.
func TestViewListsPagesOfTheIndex(t *testing.T) {
	t.Parallel()
	env := jetruntest.NewEnv(t)
	ctx := context.Background()
	st := engine.From(env.Runtime).Asks()
	v, err := asks.StartView(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)

	const n = 60
	base := time.Now().Add(-time.Hour)
	var want []string // newest first
	for i := range n {
		run := fmt.Sprintf("page-%02d", i)
		a, err := st.Ensure(ctx, events.Ask{ID: asks.SignalID(run, "go", 0), RunID: run, TreeID: run,
			AgentType: []string{"even", "odd"}[i%2], Kind: events.AskApprove, Via: events.AskViaSignal, Name: "go",
			Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), AskedAt: base.Add(time.Duration(i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{a.ID}, want...)
	}
	last := want[0]
	for _, id := range want {
		seen(t, v, id, func(*events.Ask) bool { return true })
	}

	// pages reads every page of f, checking each ask's JSON.
	pages := func(f asks.Filter) (ids []string, total int) {
		t.Helper()
		for range n + 1 {
			p, err := v.List(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.JSON) != len(p.Asks) {
				t.Fatalf("%d asks, %d encodings", len(p.Asks), len(p.JSON))
			}
			for i, a := range p.Asks {
				enc, _ := json.Marshal(a)
				if !bytes.Equal(p.JSON[i], enc) {
					t.Fatalf("ask %s listed as %s; it is %s", a.ID, p.JSON[i], enc)
				}
				ids = append(ids, a.ID)
			}
			total = p.Total
			if p.Next == "" {
				return ids, total
			}
			f.Cursor = p.Next
		}
		t.Fatalf("the pages of %+v never end", f)
		return nil, 0
	}
	if ids, total := pages(asks.Filter{Status: events.AskOpen, Limit: 7}); !slices.Equal(ids, want) || total != n {
		t.Fatalf("open asks by pages of 7: total %d, %v; want %d, %v", total, ids, n, want)
	}
	var odd []string
	for i, id := range want {
		if i%2 == 0 { // want is newest first: 59, 58, ...
			odd = append(odd, id)
		}
	}
	if ids, total := pages(asks.Filter{AgentType: "odd", Limit: 4}); !slices.Equal(ids, odd) || total != n/2 {
		t.Fatalf("odd asks by pages of 4: total %d, %v; want %d, %v", total, ids, n/2, odd)
	}

	a, _ := v.Get(last)
	if _, err := st.Answer(ctx, last, a.Digest, json.RawMessage(`{"approved":true}`), "ops"); err != nil {
		t.Fatal(err)
	}
	gone := want[n-1]
	if err := st.Bucket().Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	seen(t, v, last, func(a *events.Ask) bool { return a.Status == events.AskAnswered })
	natstest.Eventually(t, 30*time.Second, func() bool { _, ok := v.Get(gone); return !ok }, "removed ask %s still listed", gone)
	if ids, total := pages(asks.Filter{Status: events.AskOpen, Limit: 10}); !slices.Equal(ids, want[1:n-1]) || total != n-2 {
		t.Fatalf("open asks after an answer and a removal: total %d, %v", total, ids)
	}
	p, _ := v.List(asks.Filter{Status: events.AskAnswered})
	if p.Total != 1 || len(p.JSON) != 1 || !bytes.Contains(p.JSON[0], []byte(`"status":"answered","answer":{"value":{"approved":true},"by":"ops"`)) {
		t.Fatalf("answered asks: total %d, %s", p.Total, p.JSON)
	}
	if _, err := v.List(asks.Filter{Cursor: "not a cursor"}); err == nil {
		t.Fatal("a cursor the view never gave was taken")
	}
}
