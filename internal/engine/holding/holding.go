// Package holding asks a worker process which of the runs whose rows name
// it it no longer executes, over the worker's request subject
// (wire.Namespace.WorkerSubject), and answers such questions for a
// worker from what it has in memory.
//
// It is a second line of defence: a run whose row names a live worker that
// does not execute it (an attempt that ended without a word on its row and
// whose release was lost too) would otherwise stay held for as long as that
// worker lives. One question covers every suspect run of a worker, so its
// cost grows with workers, and nothing is added to a run's path.
package holding

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
)

// MaxRuns bounds the runs one question names (about 40 bytes each, far
// under NATS's default 1 MB payload); more wait for the next question.
const MaxRuns = 5000

type question struct {
	Runs []string `json:"runs"`
}

type answer struct {
	NotExecuted []string `json:"notExecuted"`
}

// Serve answers the questions sent to subject: executes reports whether
// the process executes run id, or is claiming it, or will release its row
// itself. Stop answering with the subscription's Unsubscribe.
func Serve(nc *nats.Conn, subject string, executes func(id string) bool) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var q question
		if json.Unmarshal(m.Data, &q) != nil {
			return
		}
		a := answer{NotExecuted: []string{}}
		for _, id := range q.Runs {
			if !executes(id) {
				a.NotExecuted = append(a.NotExecuted, id)
			}
		}
		data, err := json.Marshal(a)
		if err == nil {
			_ = m.Respond(data) // a lost answer: the asker asks again later
		}
	})
	if err != nil {
		return nil, fmt.Errorf("holding: answer on %s: %w", subject, err)
	}
	return sub, nil
}

// Ask asks the worker answering on subject which of runs (at most MaxRuns)
// it does not execute. An error means no answer (the worker is busy, gone,
// or too old to answer): the caller assumes it executes them all.
func Ask(ctx context.Context, nc *nats.Conn, subject string, runs []string) ([]string, error) {
	data, err := json.Marshal(question{Runs: runs[:min(len(runs), MaxRuns)]})
	if err != nil {
		return nil, fmt.Errorf("holding: encode question: %w", err)
	}
	m, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, fmt.Errorf("holding: ask %s: %w", subject, err)
	}
	var a answer
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return nil, fmt.Errorf("holding: answer from %s: %w", subject, err)
	}
	return a.NotExecuted, nil
}
