package asks

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// indexOf returns a view holding n open asks, as a loaded watch leaves it.
func indexOf(t *testing.T, n int) *View {
	t.Helper()
	v := &View{}
	initial := make(map[string]*Entry, n)
	base := time.Now().Add(-time.Hour)
	for i := range n {
		run := fmt.Sprintf("run-%d", i)
		e, err := newEntry(&events.Ask{ID: SignalID(run, "go", 0), RunID: run, Kind: events.AskApprove, Status: events.AskOpen,
			AskedAt: base.Add(time.Duration(i) * time.Millisecond), Payload: []byte(`{"diff":"+12 -3"}`)})
		if err != nil {
			t.Fatal(err)
		}
		initial[e.Ask.ID] = e
	}
	v.load(initial)
	return v
}

// A page costs the same whatever the size of the index: List copies the
// page, not the index, and encodes nothing (each ask's JSON was encoded
// when it changed, and is handed out as it is).
func TestListCopiesOnlyThePage(t *testing.T) {
	small, large := indexOf(t, 100), indexOf(t, 10_000)
	f := Filter{Status: events.AskOpen, Limit: 10}
	page := func(v *View) Page {
		p, err := v.List(f)
		if err != nil || len(p.Asks) != 10 || p.Next == "" {
			t.Fatalf("page: %d asks, next %q, %v", len(p.Asks), p.Next, err)
		}
		return p
	}
	allocs := func(v *View) float64 { return testing.AllocsPerRun(20, func() { page(v) }) }
	if s, l := allocs(small), allocs(large); l != s {
		t.Fatalf("a page of 10 takes %v allocations over 100 asks, %v over 10,000; want the same", s, l)
	}
	first, again := page(large), page(large)
	if &first.JSON[0][0] != &again.JSON[0][0] {
		t.Fatal("an ask's JSON was encoded again for a second list")
	}
	f.Cursor = first.Next
	if next := page(large); next.Asks[0].ID == first.Asks[9].ID || next.Total != 10_000 {
		t.Fatalf("second page starts at %s (total %d), after %s", next.Asks[0].ID, next.Total, first.Asks[9].ID)
	}
}
