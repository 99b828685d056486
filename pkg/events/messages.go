package events

import (
	"encoding/json"
	"time"
)

// Headers jetrun sets on messages, besides Nats-Msg-Id.
const (
	// HeaderReason says why a message was dead-lettered.
	HeaderReason = "Jetrun-Reason"
	// HeaderOriginalSubject is the subject a dead-lettered message was
	// published to.
	HeaderOriginalSubject = "Jetrun-Original-Subject"
	// HeaderOriginalSequence is the dead-lettered message's sequence in its
	// original stream.
	HeaderOriginalSequence = "Jetrun-Original-Sequence"
	// HeaderOriginalMsgID is the dead-lettered message's Nats-Msg-Id, if any.
	HeaderOriginalMsgID = "Jetrun-Original-Msg-Id"
	// HeaderAttempt is the attempt that published a run event.
	HeaderAttempt = "Jetrun-Attempt"
	// HeaderRowAfter, on a dispatch, says its publisher creates the run's
	// row only after the dispatch is stored (parent.Client does for a
	// top-level run that is not detached): a worker that finds no row then
	// reads the clear tombstone only after the miss, sparing a read on the
	// common path where the row is found.
	HeaderRowAfter = "Jetrun-Row-After"
	// HeaderFinishOwed, on a status event, names the status whose finish
	// the run owes its onFinish handler: the finisher (pkg/finish, run by
	// parent-worker) publishes that finish. A hint only: the row's ledger
	// decides.
	HeaderFinishOwed = "Jetrun-Finish-Owed"
)

// Size limits enforced on the way in, so a run row (input, output and
// summary together) always fits in one NATS message (1 MiB by default).
const (
	MaxInputBytes   = 256 << 10
	MaxOutputBytes  = 256 << 10
	MaxSummaryBytes = 64 << 10
	MaxChunkBytes   = 256 << 10
)

// StatusEvent is published on jetrun.run.<id>.status at every transition.
type StatusEvent struct {
	RunID             string    `json:"runId"`
	Status            Status    `json:"status"`
	Reason            string    `json:"reason,omitempty"`
	Error             string    `json:"error,omitempty"`
	Retryable         bool      `json:"retryable,omitempty"`
	ChildStillRunning bool      `json:"childStillRunning,omitempty"`
	Attempt           int       `json:"attempt,omitempty"`
	Worker            string    `json:"worker,omitempty"`
	At                time.Time `json:"at"`
	// AgentType, Parent and StartedAt (the run's first start) let a
	// metering consumer account for the run without reading its row.
	AgentType string    `json:"agentType,omitempty"`
	Parent    string    `json:"parent,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Usage is the run's usage so far (its row's), on the status events
	// that end it; nil when it reported none.
	Usage *Usage `json:"usage,omitempty"`
}

// Chunk is one piece of a run's streamed output, on jetrun.run.<id>.chunk.
// Seq is 1, 2, 3… per run, across attempts.
//
// A stored chunk event may carry several chunks emitted within the
// worker's chunk window (coalesced): Data is chunk Seq's, More holds the
// data of chunks Seq+1 … Last in order, and Last is the range's last
// sequence. A single chunk has neither Last nor More. Replay (and
// everything reading through it: SSE, the UI, the CLI, parent.Replay)
// yields every chunk on its own, so only a reader of raw stored messages
// sees More.
type Chunk struct {
	RunID   string            `json:"runId"`
	Seq     int64             `json:"seq"`
	Data    json.RawMessage   `json:"data"`
	Attempt int               `json:"attempt,omitempty"`
	Last    int64             `json:"last,omitempty"`
	More    []json.RawMessage `json:"more,omitempty"`
}

// LastSeq is the sequence of the last chunk c carries: Last for a
// coalesced event, else Seq.
func (c Chunk) LastSeq() int64 { return max(c.Seq, c.Last) }

// Pieces returns the chunks c carries, one Chunk each, in order: c itself
// when it carries one.
func (c Chunk) Pieces() []Chunk {
	if len(c.More) == 0 {
		return []Chunk{c}
	}
	out := make([]Chunk, 0, 1+len(c.More))
	out = append(out, Chunk{RunID: c.RunID, Seq: c.Seq, Data: c.Data, Attempt: c.Attempt})
	for i, d := range c.More {
		out = append(out, Chunk{RunID: c.RunID, Seq: c.Seq + 1 + int64(i), Data: d, Attempt: c.Attempt})
	}
	return out
}

// Progress is a coalesced progress snapshot, on jetrun.run.<id>.progress.
type Progress struct {
	RunID    string          `json:"runId"`
	Fraction float64         `json:"fraction"`
	Phase    string          `json:"phase,omitempty"`
	Message  string          `json:"message,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	Attempt  int             `json:"attempt,omitempty"`
	At       time.Time       `json:"at"`
}

// Milestone is a durable named point a run reached, on
// jetrun.run.<id>.milestone, published with Nats-Msg-Id <runId>.m.<sequence>.
// Sequence is 1, 2, 3… per run, across attempts.
type Milestone struct {
	RunID    string          `json:"runId"`
	Sequence int             `json:"sequence"`
	Name     string          `json:"name"`
	Data     json.RawMessage `json:"data,omitempty"`
	Attempt  int             `json:"attempt,omitempty"`
	At       time.Time       `json:"at"`
}

// Signal states on a run's signal events.
const (
	SignalWaiting  = "waiting"
	SignalReceived = "received"
)

// SignalEvent is published on jetrun.run.<id>.signal when a handler starts
// waiting for a signal and when the signal arrives.
type SignalEvent struct {
	RunID   string          `json:"runId"`
	Name    string          `json:"name"`
	State   string          `json:"state"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Seq is the signal's sequence in the signals stream (received only).
	Seq     uint64    `json:"seq,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	At      time.Time `json:"at"`
}

// MaxSignalBytes bounds a signal's payload.
const MaxSignalBytes = 64 << 10

// Detached holds the settings of a detached run.
//
// Each budget is in milliseconds: a positive value is the budget, 0 (the Go
// zero value) takes the reconciler's default, and BudgetNever (any negative
// value) disables it. On the wire an explicit 0 disables the budget too and
// decodes as BudgetNever, while an absent field takes the default.
type Detached struct {
	OnFinish string `json:"onFinish,omitempty"`
	// MaxBudgetMs bounds the run's whole life, from its start.
	MaxBudgetMs int64 `json:"maxBudgetMs,omitempty"`
	// NoProgressBudgetMs bounds the silence between the run's signs of
	// progress (chunks, progress, milestones), armed by the first one.
	NoProgressBudgetMs int64 `json:"noProgressBudgetMs,omitempty"`
	// OnMilestones lists the milestone names whose first occurrence is
	// announced to the OnFinish handler as a MilestoneNotice (see
	// docs/delivery.md). Each is a token like a run id.
	OnMilestones []string `json:"onMilestones,omitempty"`
}

// BudgetNever, as Detached.MaxBudgetMs or Detached.NoProgressBudgetMs,
// disables that budget: the run is never given up for it.
const BudgetNever int64 = -1

// UnmarshalJSON decodes d, mapping a budget written as 0 or any negative
// number to BudgetNever: "noProgressBudgetMs": 0 means no budget, while a
// budget that is absent takes the default.
func (d *Detached) UnmarshalJSON(data []byte) error {
	type plain Detached
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	var present struct {
		MaxBudgetMs        *int64 `json:"maxBudgetMs"`
		NoProgressBudgetMs *int64 `json:"noProgressBudgetMs"`
	}
	if err := json.Unmarshal(data, &present); err != nil {
		return err
	}
	if present.MaxBudgetMs != nil && *present.MaxBudgetMs <= 0 {
		p.MaxBudgetMs = BudgetNever
	}
	if present.NoProgressBudgetMs != nil && *present.NoProgressBudgetMs <= 0 {
		p.NoProgressBudgetMs = BudgetNever
	}
	*d = Detached(p)
	return nil
}

// Finish tells a finish handler how a detached run ended (or was given
// up). It is published to jetrun.finish.<handler> with Nats-Msg-Id
// FinishMsgID (<runId>.<status> for the first ending with the status),
// which is also the idempotency key handlers should use.
type Finish struct {
	RunID             string          `json:"runId"`
	Handler           string          `json:"handler"`
	Status            Status          `json:"status"`
	Reason            string          `json:"reason,omitempty"`
	Error             string          `json:"error,omitempty"`
	Retryable         bool            `json:"retryable"`
	ChildStillRunning bool            `json:"childStillRunning"`
	Summary           string          `json:"summary,omitempty"`
	Output            json.RawMessage `json:"output,omitempty"`
	// Ending counts the run's earlier endings with the same status: 0 (left
	// out) for the first; 1 when a run given up, then resumed by a retry,
	// is given up again; and so on.
	Ending int `json:"ending,omitempty"`
	// Run is the run's row when the finish was published.
	Run json.RawMessage `json:"run,omitempty"`
}
