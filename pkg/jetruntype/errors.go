package jetruntype

import "errors"

// Errors every role returns (wrapped); test for them with errors.Is. The
// roles re-export them under their own names (parent.ErrRunNotFound, …).
var (
	// ErrRunNotFound is the error of every call about a run id with no
	// row (never dispatched, or cleared).
	ErrRunNotFound = errors.New("run not found")
	// ErrBudgetExceeded is the error of a nested run that a runs budget
	// of its tree does not allow, and of usage charged into a tree
	// stopped for a budget ([events.TreeBudget]).
	ErrBudgetExceeded = errors.New("budget exceeded")
	// ErrKeyBusy is the error of a submit with strategy drop while a run
	// of its concurrency key is live or queued ([events.Strategy]).
	ErrKeyBusy = errors.New("concurrency key is busy")
)
