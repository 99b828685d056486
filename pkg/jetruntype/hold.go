package jetruntype

import "time"

// Hold is an open reservation against a tree's budget (worker.Run.Reserve),
// listed on the row of the run that carries the budget: it counts as spent
// until the run's next usage report settles it, its attempt releases it,
// or Until passes (the worker moves Until on while the attempt runs).
type Hold struct {
	// ID names the hold: <run>.<attempt>.<sequence in the attempt>.
	ID      string      `json:"id"`
	Run     string      `json:"run"`
	Attempt int         `json:"attempt"`
	Amount  UsageTotals `json:"amount"`
	Until   time.Time   `json:"until"`
}
