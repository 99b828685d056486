package events

import (
	"errors"
	"fmt"
	"time"
)

// Strategy says what happens to a run submitted under a concurrency key
// while another run of that key is live or queued. Runs of one key never
// execute at the same time, whatever the strategy.
type Strategy string

// The submit strategies (docs/protocol.md, "Concurrency keys").
const (
	// StrategyQueue runs the key's submits one at a time, in order. It is
	// the default when a dispatch has a concurrency key.
	StrategyQueue Strategy = "queue"
	// StrategyLatest: a new submit supersedes the runs queued under the
	// key (they end aborted, reason superseded); the live one finishes.
	StrategyLatest Strategy = "latest"
	// StrategyDrop refuses a submit while a run of the key is live or
	// queued.
	StrategyDrop Strategy = "drop"
	// StrategyDebounce is StrategyLatest that also waits for a quiet
	// window (DebounceMs, default DefaultDebounce) after the newest submit
	// before the run may start: only the last submit of a burst runs.
	StrategyDebounce Strategy = "debounce"
	// StrategyMerge collapses the runs queued under the key into one run
	// whose input is the JSON array of their inputs, oldest first; the
	// others end aborted, reason merged.
	StrategyMerge Strategy = "merge"
)

// Reasons recorded on runs a strategy ended.
const (
	// ReasonSuperseded: a newer submit under the same key (latest,
	// debounce) replaced this queued run; the row's supersededBy names it.
	ReasonSuperseded = "superseded"
	// ReasonMerged: this queued run's input was carried into another run
	// (merge); the row's mergedInto names it.
	ReasonMerged = "merged"
)

// DefaultDebounce is the quiet window of StrategyDebounce when the dispatch
// sets no DebounceMs.
const DefaultDebounce = 750 * time.Millisecond

// MaxDebounce bounds DebounceMs.
const MaxDebounce = time.Hour

// valid reports whether s is a known strategy ("" counts: it means queue).
func (s Strategy) valid() bool {
	switch s {
	case "", StrategyQueue, StrategyLatest, StrategyDrop, StrategyDebounce, StrategyMerge:
		return true
	}
	return false
}

func (d *Dispatch) validateKey() []error {
	var errs []error
	if d.ConcurrencyKey == "" {
		if d.Strategy != "" {
			errs = append(errs, errors.New(`"strategy" needs a "concurrencyKey"`))
		}
		if d.DebounceMs != 0 {
			errs = append(errs, errors.New(`"debounceMs" needs a "concurrencyKey"`))
		}
		return errs
	}
	if err := validateToken("concurrency key", d.ConcurrencyKey); err != nil {
		errs = append(errs, fmt.Errorf(`"concurrencyKey": %w`, err))
	}
	if !d.Strategy.valid() {
		errs = append(errs, fmt.Errorf(`"strategy" %q is not one of queue, latest, drop, debounce, merge`, string(d.Strategy)))
	}
	if d.DebounceMs < 0 || time.Duration(d.DebounceMs)*time.Millisecond > MaxDebounce {
		errs = append(errs, fmt.Errorf(`"debounceMs" must be between 0 and %d, got %d`, MaxDebounce.Milliseconds(), d.DebounceMs))
	} else if d.DebounceMs != 0 && d.Strategy != StrategyDebounce {
		errs = append(errs, errors.New(`"debounceMs" applies only to strategy "debounce"`))
	}
	return errs
}
