package jetruntype

import (
	"fmt"

	"github.com/jetrun/jetrun/pkg/events"
)

// UsageTotals and Usage are the events package's (a run's usage travels
// on its status events).
type (
	UsageTotals = events.UsageTotals
	Usage       = events.Usage
)

// Overrun says which budget of a tree was exceeded and by how much.
type Overrun struct {
	// Owner is the run that carries the budget (the top of the stopped
	// subtree).
	Owner string `json:"owner"`
	// Budget names the bound: "tokens", "costMicros" or "runs".
	Budget string `json:"budget"`
	// Limit is the bound; Used what the tree had spent when it was
	// stopped: with the report that took it past Limit. The owner's
	// TreeUsage says what the tree spent in the end (reports on their way
	// when it was stopped, and refused ones, count there too).
	Limit int64 `json:"limit"`
	Used  int64 `json:"used"`
}

// String says which budget of which run was exceeded, and by how much.
func (o Overrun) String() string {
	return fmt.Sprintf("the %s budget of run %s (%d) was exceeded by %d (used %d)", o.Budget, o.Owner, o.Limit, o.Used-o.Limit, o.Used)
}
