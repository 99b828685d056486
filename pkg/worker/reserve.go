package worker

import (
	"context"
	"fmt"
	"sync"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker/internal/runhook"
)

// ReserveOption is an option of Run.Reserve.
type ReserveOption func(*reserveOptions)

// reserveOptions are the options of one Run.Reserve.
type reserveOptions struct {
	limit string // Limit
}

// Reservation is spend a run holds against its tree's budget before it is
// paid (Run.Reserve): it counts as spent until the run's next usage report
// settles it (the report's real spend replaces it), until Release, or
// until its step or the run's attempt ends, whichever comes first. Its methods are
// safe for concurrent use.
type Reservation struct {
	once    sync.Once
	release func()
}

// Release gives back what r holds, unless a usage report settled it
// already. It is idempotent and settles nothing: call it when the spend r
// was for did not happen (the model call failed before it was paid).
func (r *Reservation) Release() {
	if r == nil || r.release == nil {
		return
	}
	r.once.Do(r.release)
}

// Reserve holds u, what the handler expects to spend next (a model call's
// tokens, its cost), against the budget of every run of its tree whose
// budget it draws from (events.TreeBudget), before anything is paid. It
// returns at once: with a Reservation when every budget has room for u on
// top of what the tree spent and what its other reservations hold, or
// with an error wrapping ErrBudgetExceeded (saying which budget and what u
// would take it to) when one has not; a refused reservation holds and
// charges nothing, and the tree is not stopped (a smaller one may fit).
// A handler that returns that error ends its run interrupted, reason
// budget-exceeded.
//
// The run's next usage report (Run.Usage, a step's included) settles every
// reservation the run holds: the reported spend replaces what they held. A
// reservation not settled is released when the step it was made in ends
// (made with the context of Run.Step's function), or else when the attempt
// ends (Release gives it back sooner), and, should its worker die, stops
// counting within a lease (Config.Lease). So a tree whose runs reserve before they spend
// overshoots its budget by at most what they spent beyond what they
// reserved, however many runs are live.
//
// In a tree without a budget Reserve checks u and holds nothing. u must
// not be negative or empty, nor any count above events.MaxReserveAmount
// (the error says which): such a reservation reserves nothing.
func (r *Run) Reserve(ctx context.Context, u Usage, opts ...ReserveOption) (*Reservation, error) {
	var o reserveOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	// On a limit, an empty amount reserves a request and a call slot.
	if err := events.ValidateReserve(u); err != nil && (o.limit == "" || u != (Usage{})) {
		return nil, fmt.Errorf("worker: reserve: %w", err)
	}
	release, err := r.b.Reserve(ctx, runhook.ReserveRequest{Usage: u, Limit: o.limit})
	if err != nil {
		return nil, err
	}
	res := &Reservation{release: release}
	if s, ok := ctx.Value(stepUsageKey{}).(*stepUsage); ok {
		s.reserve(res) // released when the step ends
	}
	return res, nil
}
