package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/testsignal"
)

// A sweep decides, then acts: for each run of the active index it reads
// the row and the facts that need a read (the holder's liveness, the
// parent's row), asks model.Due what to do, and executes the actions in
// order, one file per step: republish.go (owed finishes and notices,
// unserved handlers), cascade.go (a parent's cancel or tree stop),
// keys.go (concurrency keys), budgets.go (budgets), recover.go (lost
// dispatches and workers), holders.go (live holders that do not execute
// their runs); retention.go runs on its own timer. Every row write is a
// model event under a compare-and-set: an action whose row moved on since
// it was read changes nothing, and the next sweep decides again.

// sweep is the state of one pass over the active index.
type sweep struct {
	r     *Reconciler
	now   time.Time
	watch *runstore.ActiveWatch

	mu      sync.Mutex
	stats   Stats
	parents map[string]*model.Row        // parent rows read by this sweep (nil: gone)
	served  map[string]bool              // finish handlers a deliverer follows, as seen by this sweep
	copies  map[string]map[string]uint64 // per handler, Nats-Msg-Id → sequence of the finishes waiting
	keys    map[string]bool              // concurrency keys this sweep advanced (keys.go)
	held    map[string][]*model.Row      // per live worker, the running runs it holds (holders.go)
}

func (s *sweep) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// run reconciles one run of the active index.
func (s *sweep) run(ctx context.Context, ir runstore.IndexedRun) error {
	r := s.r
	row, _, err := r.store.Get(ctx, ir.ID)
	if errors.Is(err, runstore.ErrRunNotFound) {
		if s.now.Sub(ir.CreatedAt) > orphanGrace {
			s.count(func(st *Stats) { st.Unindexed++ })
			s.watch.Forget(ir.ID)
			return r.store.Index().UnindexID(ctx, ir.ID)
		}
		return nil
	}
	if err != nil {
		return err
	}
	f, err := s.facts(ctx, row)
	if err != nil {
		return err
	}
	for _, a := range model.Due(row, s.now, r.policy, f) {
		if err := s.execute(ctx, row, a); err != nil {
			return err
		}
		r.TestSignals.Acted.Signal(Acted{RunID: row.ID, Action: a})
	}
	return nil
}

// facts reads what model.Due needs to know of a live row beyond the row:
// whether a live worker holds it (the followed liveness keys), and its
// parent's row (read once per sweep).
func (s *sweep) facts(ctx context.Context, row *model.Row) (model.Facts, error) {
	if row.Status.Final() || row.Settled() {
		return model.Facts{}, nil
	}
	f := model.Facts{HolderAlive: s.r.holderAlive(ctx, row)}
	if row.Parent != "" {
		p, err := s.parent(ctx, row.Parent)
		if err != nil {
			return f, err
		}
		f.Parent = p
	}
	return f, nil
}

// execute carries out one action model.Due decided for row.
func (s *sweep) execute(ctx context.Context, row *model.Row, a model.Action) error {
	switch a := a.(type) {
	case model.Unindex:
		s.count(func(st *Stats) { st.Unindexed++ })
		s.watch.Forget(row.ID)
		return s.r.store.Index().Unindex(ctx, row)
	case model.RepublishFinish:
		return s.republishFinish(ctx, row, a)
	case model.RepublishNotice:
		return s.republishNotice(ctx, row, a)
	case model.RenotifyCancel:
		s.renotifyCancel(ctx, row)
	case model.StopForTree:
		return s.stopForTree(ctx, row, a)
	case model.CascadeCancel:
		return s.cascade(ctx, row, a)
	case model.AdvanceKey:
		return s.advanceKey(ctx, row)
	case model.GiveUpByBudget, model.WatchBudget:
		return s.budget(ctx, row, a)
	case model.ReleaseLostChild:
		return s.releaseLostChild(ctx, row)
	case model.AskHolder:
		s.noteHeld(row)
	case model.Dispatch:
		return s.dispatch(ctx, row, a)
	case model.Redispatch:
		return s.redispatch(ctx, row, a)
	case model.FailDispatchLost:
		return s.failDispatchLost(ctx, row, a)
	default:
		return fmt.Errorf("reconcile: run %s: no step executes %T", row.ID, a)
	}
	return nil
}

// TestSignals tell a test what the reconciler did, so that it waits on a
// step rather than polling rows; they are nil (no-op) in production. A
// test calls Init before Start (or before calling Sweep).
type TestSignals struct {
	// Acted: an action model.Due decided was executed on a run (by a
	// sweep, or a budget's by the check between sweeps).
	Acted testsignal.Signal[Acted]
	// Swept: a sweep ended, with its stats.
	Swept testsignal.Signal[Stats]
	// BudgetsChecked: the runs noted between sweeps were looked at, this
	// many.
	BudgetsChecked testsignal.Signal[int]
	// Retained: a retention pass ended, clearing this many runs.
	Retained testsignal.Signal[int]
}

// Init makes every signal carry values to the test tb.
func (ts *TestSignals) Init(tb testsignal.TB) {
	ts.Acted.Init(tb)
	ts.Swept.Init(tb)
	ts.BudgetsChecked.Init(tb)
	ts.Retained.Init(tb)
}

// Acted is one action the reconciler executed: Action on run RunID, by a
// sweep or, Between, by the budget check between sweeps.
type Acted struct {
	RunID   string
	Action  model.Action
	Between bool
}

// announce publishes a transition the reconciler made; the next sweep
// republishes an owed finish if this fails. A run it ended or gave up with
// no worker holding it first counts the steps its lost attempt stored
// (countLostSteps).
func (r *Reconciler) announce(ctx context.Context, row *model.Row) {
	row = r.countLostSteps(ctx, row)
	if err := r.rt.Announce(ctx, row, ""); err != nil {
		r.fault(ctx, "announce transition", err, "run_id", row.ID, "status", row.Status)
	}
}
