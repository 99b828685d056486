// Package runhook is the seam between package worker's Run and package
// workertest: a Run built through NewRun sends what a handler does to a
// recorder instead of to a worker, JetStream and the runs bucket.
//
// It is internal so that the seam is not public API: handlers still receive
// the concrete *worker.Run.
package runhook

import (
	"errors"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
)

// ErrUnsupported is returned by the Run methods a recorder cannot stand in
// for (nested runs: Spawn, RunChild).
var ErrUnsupported = errors.New("not supported by a test run")

// NewRun returns a *worker.Run for row whose methods call b, which
// implements worker's backend interface (worker/run.go; it panics
// otherwise). Package worker sets it when it is initialized.
var NewRun func(row *model.Row, b any) any

// ReserveRequest is what a handler asks of worker.Run.Reserve, checked:
// the amount to hold (not negative, not empty, within
// events.MaxReserveAmount), and the options it named.
type ReserveRequest struct {
	Usage events.UsageReport
	Limit string // worker.Limit: the provider limit it also waits on
}
