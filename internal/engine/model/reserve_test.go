package model_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

func hold(id, run string, attempt int, tokens int64, until time.Time) model.Hold {
	return model.Hold{ID: id, Run: run, Attempt: attempt, Amount: jetruntype.UsageTotals{InputTokens: tokens}, Until: until}
}

func holdIDs(r *model.Row) []string {
	var ids []string
	for _, h := range r.Holds {
		ids = append(ids, h.ID)
	}
	return ids
}

// A reservation fits when the tree's totals, the live holds and it stay
// within every bound; expired holds and the run's earlier attempts' do not
// count (and are dropped); a stopped tree refuses every one.
func TestReservedFitsTheBudget(t *testing.T) {
	now := time.Now()
	live, gone := now.Add(time.Minute), now.Add(-time.Second)
	for _, tc := range []struct {
		name     string
		budget   events.TreeBudget
		tree     jetruntype.UsageTotals
		holds    []model.Hold
		overrun  *jetruntype.Overrun
		hold     model.Hold
		wantErr  string // "over": an *OverrunError
		wantUsed int64  // its Used
		want     []string
	}{
		{name: "fits exactly", budget: events.TreeBudget{Tokens: 1000}, tree: jetruntype.UsageTotals{InputTokens: 300},
			holds: []model.Hold{hold("a.1.1", "a", 1, 400, live)}, hold: hold("b.1.1", "b", 1, 300, live), want: []string{"a.1.1", "b.1.1"}},
		{name: "one token over", budget: events.TreeBudget{Tokens: 1000}, tree: jetruntype.UsageTotals{InputTokens: 300},
			holds: []model.Hold{hold("a.1.1", "a", 1, 400, live)}, hold: hold("b.1.1", "b", 1, 301, live), wantErr: "over", wantUsed: 1001, want: []string{"a.1.1"}},
		{name: "an expired hold does not count", budget: events.TreeBudget{Tokens: 1000},
			holds: []model.Hold{hold("a.1.1", "a", 1, 400, gone)}, hold: hold("b.1.1", "b", 1, 1000, live), want: []string{"b.1.1"}},
		{name: "an earlier attempt's hold does not count", budget: events.TreeBudget{Tokens: 1000},
			holds: []model.Hold{hold("b.1.1", "b", 1, 400, live)}, hold: hold("b.2.1", "b", 2, 1000, live), want: []string{"b.2.1"}},
		{name: "a retry changes nothing", budget: events.TreeBudget{Tokens: 1000},
			holds: []model.Hold{hold("b.1.1", "b", 1, 400, live)}, hold: hold("b.1.1", "b", 1, 400, live), wantErr: "no change", want: []string{"b.1.1"}},
		{name: "cost", budget: events.TreeBudget{Tokens: 1 << 40, CostMicros: 50}, tree: jetruntype.UsageTotals{CostMicros: 40},
			hold: model.Hold{ID: "b.1.1", Run: "b", Attempt: 1, Amount: jetruntype.UsageTotals{CostMicros: 11}, Until: live}, wantErr: "over", wantUsed: 51},
		{name: "a stopped tree", budget: events.TreeBudget{Tokens: 1000}, overrun: &jetruntype.Overrun{Owner: "root", Budget: "tokens", Limit: 1000, Used: 1100},
			hold: hold("b.1.1", "b", 1, 1, live), wantErr: "over", wantUsed: 1100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := tc.tree
			r := &model.Row{ID: "root", Budget: &tc.budget, TreeUsage: &tree, Holds: tc.holds, Overrun: tc.overrun}
			err := model.Apply(r, model.Reserved{Hold: tc.hold}, now)
			var over *model.OverrunError
			switch tc.wantErr {
			case "":
				if err != nil {
					t.Fatal(err)
				}
			case "over":
				if !errors.As(err, &over) || over.Overrun.Used != tc.wantUsed || over.Overrun.Owner != "root" {
					t.Fatalf("err %v; want an overrun at %d", err, tc.wantUsed)
				}
			case "no change":
				if !errors.Is(err, model.ErrNoChange) {
					t.Fatalf("err %v; want ErrNoChange", err)
				}
			}
			if fmt.Sprint(holdIDs(r)) != fmt.Sprint(tc.want) {
				t.Fatalf("holds %v; want %v", holdIDs(r), tc.want)
			}
			if *r.TreeUsage != tc.tree {
				t.Fatalf("tree usage %+v; a reservation charges nothing", *r.TreeUsage)
			}
		})
	}
}

// A row holds at most MaxHolds live reservations.
func TestReservedRefusesPastMaxHolds(t *testing.T) {
	now := time.Now()
	r := &model.Row{ID: "root", Budget: &events.TreeBudget{Tokens: 1 << 40}}
	for i := range model.MaxHolds {
		must(t, r, now, model.Reserved{Hold: hold(fmt.Sprintf("r%d.1.1", i), fmt.Sprint("r", i), 1, 1, now.Add(time.Minute))})
	}
	if err := model.Apply(r, model.Reserved{Hold: hold("x.1.1", "x", 1, 1, now.Add(time.Minute))}, now); !errors.Is(err, model.ErrTooManyHolds) {
		t.Fatalf("err %v; want ErrTooManyHolds", err)
	}
}

// A charge settles the holds it names in the same write; a release drops
// an attempt's named holds (or all of them) and expired ones; a renewal
// moves an attempt's live holds on, never back.
func TestHoldsSettleReleaseRenew(t *testing.T) {
	now := time.Now()
	r := &model.Row{ID: "root", Budget: &events.TreeBudget{Tokens: 1000}}
	for _, h := range []model.Hold{hold("a.1.1", "a", 1, 100, now.Add(time.Minute)), hold("a.1.2", "a", 1, 100, now.Add(time.Minute)),
		hold("b.1.1", "b", 1, 100, now.Add(time.Minute)), hold("b.1.2", "b", 1, 100, now.Add(2*time.Second))} {
		must(t, r, now, model.Reserved{Hold: h})
	}
	must(t, r, now, model.Charged{Mark: model.ChargeMark{Run: "a", Attempt: 1, Seq: 1}, Delta: jetruntype.UsageTotals{InputTokens: 150}, Settles: []string{"a.1.1"}})
	if fmt.Sprint(holdIDs(r)) != "[a.1.2 b.1.1 b.1.2]" || r.TreeUsage.Tokens() != 150 {
		t.Fatalf("after the charge: holds %v, tree %d", holdIDs(r), r.TreeUsage.Tokens())
	}
	must(t, r, now, model.HoldsReleased{Run: "a", Attempt: 1, IDs: []string{"a.1.2"}})
	if fmt.Sprint(holdIDs(r)) != "[b.1.1 b.1.2]" {
		t.Fatalf("after the release: holds %v", holdIDs(r))
	}
	if err := model.Apply(r, model.HoldsRenewed{Run: "b", Attempt: 1, Until: now.Add(time.Second)}, now); !errors.Is(err, model.ErrNoChange) {
		t.Fatalf("a renewal that moves nothing on: %v", err)
	}
	must(t, r, now, model.HoldsRenewed{Run: "b", Attempt: 1, Until: now.Add(3 * time.Second)})
	if !r.Holds[0].Until.Equal(now.Add(time.Minute)) || !r.Holds[1].Until.Equal(now.Add(3*time.Second)) {
		t.Fatalf("after the renewal: %+v", r.Holds)
	}
	if got := r.HeldTotals(now.Add(10 * time.Second)); got.Tokens() != 100 {
		t.Fatalf("held 10 s on: %d; want only the unexpired hold's 100", got.Tokens())
	}
	must(t, r, now, model.HoldsReleased{Run: "b", Attempt: 1})
	if len(r.Holds) != 0 {
		t.Fatalf("after releasing the attempt's: %v", holdIDs(r))
	}
	if err := model.Apply(r, model.HoldsReleased{Run: "b", Attempt: 1}, now); !errors.Is(err, model.ErrNoChange) {
		t.Fatalf("a release of nothing: %v", err)
	}
}
