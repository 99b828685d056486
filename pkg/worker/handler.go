package worker

import (
	"context"
	"errors"
)

// Handler executes runs of one agent type.
//
// ServeRun returns the run's result, or an error that ends the run with
// status "error" and the error's text (jetruntype.Cancel's too: the run is
// not retried). An error marked jetruntype.RetryAfter(err, d) asks for
// another attempt after d instead (retry.go), as long as Config.MaxAttempts
// allows. A panic ends the run "error" with the panic text; the worker lives
// on. ctx is cancelled when the run is
// cancelled, when its worker shuts down, or when the worker lost its lease;
// context.Cause(ctx) says which (ErrCancelled, ErrShuttingDown, ErrLeaseLost).
type Handler interface {
	ServeRun(ctx context.Context, run *Run) (Result, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, run *Run) (Result, error)

// ServeRun calls f(ctx, run).
func (f HandlerFunc) ServeRun(ctx context.Context, run *Run) (Result, error) { return f(ctx, run) }

// Result is what a successful run returns.
type Result struct {
	// Summary is a short text for humans and parent models.
	Summary string
	// Output is any JSON-encodable structured result; nil for none.
	Output any
}

// Progress is a progress report. Fraction is clamped to 0..1.
type Progress struct {
	Fraction float64
	Phase    string
	Message  string
	// Data travels on the progress event only; it is not kept on the row.
	Data any
}

// Errors seen by handlers, as context causes and from Run methods.
var (
	// ErrCancelled is the context cause when the run was cancelled.
	ErrCancelled = errors.New("run cancelled")
	// ErrShuttingDown is the context cause when the worker is shutting down
	// and the run will be handed to another worker.
	ErrShuttingDown = errors.New("worker shutting down")
	// ErrLeaseLost is the context cause, and the error of Run methods, once
	// another worker took the run over or the run was finalized elsewhere:
	// this worker may no longer write the run's row or events.
	ErrLeaseLost = errors.New("run lease lost")
	// ErrTooLarge is returned by Run methods when a payload exceeds its
	// limit.
	ErrTooLarge = errors.New("payload too large")
)
