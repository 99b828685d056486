// Package runhook is the seam between package worker's Run and package
// workertest: a Run built through NewRun sends what a handler does to a
// Backend (a recorder) instead of to a worker, JetStream and the runs
// bucket. Package worker validates and encodes first (name limits, JSON
// encoding, payload sizes), so a Backend sees what would go on the wire.
//
// It is internal so that the seam is not public API: handlers still receive
// the concrete *worker.Run.
package runhook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// ErrUnsupported is returned by the Run methods a Backend cannot stand in
// for (nested runs: Spawn, RunChild).
var ErrUnsupported = errors.New("not supported by a test run")

// Progress is a progress report as worker.Run.Progress passes it on: the
// fraction clamped to 0..1 and the data JSON-encoded.
type Progress struct {
	Fraction float64
	Phase    string
	Message  string
	Data     json.RawMessage
}

// Backend receives what a handler does with its Run.
type Backend interface {
	Logger() *slog.Logger
	Milestones() []events.Milestone
	Chunk(ctx context.Context, data json.RawMessage) error
	Progress(ctx context.Context, p Progress) error
	// Milestone numbers and records a milestone whose name is valid.
	Milestone(ctx context.Context, name string, data json.RawMessage) (events.Milestone, error)
	Flush(ctx context.Context) error
	Park(ctx context.Context, wait func(ctx context.Context) error) error
	// Wait is called with a valid signal name.
	Wait(ctx context.Context, name string) (json.RawMessage, error)
	// Call is called with a valid call name.
	Call(ctx context.Context, name string, input json.RawMessage) (json.RawMessage, error)
	// Steps returns the steps earlier attempts stored.
	Steps() []events.Step
	// StoreStep records a step the handler completed (or failed
	// permanently), validated and encoded.
	StoreStep(ctx context.Context, st events.Step) error
}

// NewRun returns a *worker.Run for row whose methods call b. Package worker
// sets it when it is initialized; the result is a *worker.Run.
var NewRun func(row *jetruntype.Run, b Backend) any
