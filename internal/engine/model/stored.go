package model

import (
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// The delivery ledger of a detached run lives on its row: one slot per
// final status its finish handler is owed a finish for (Finishes, with
// Delivered), and one per milestone name it is owed a notice for
// (Notices). Apply changes it; a reader sees
// jetruntype.FinishDelivery and NoticeDelivery (Row.View).

// Slot is how the delivery of one finish or notice goes.
type Slot struct {
	// DueAt is when the finish or notice became owed.
	DueAt time.Time `json:"dueAt"`
	// Attempts counts handler invocations.
	Attempts int `json:"attempts,omitempty"`
	// ClaimedBy and ClaimedUntil: the deliverer invoking the handler now.
	ClaimedBy    string    `json:"claimedBy,omitempty"`
	ClaimedUntil time.Time `json:"claimedUntil,omitzero"`
	LastError    string    `json:"lastError,omitempty"`
	// FailedAt is set when delivery was given up and the message
	// dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
	// Seq is the finish stream sequence of the copy last found or
	// published: while it is still in the stream no other copy is
	// published, so one copy waits for a deliverer.
	Seq uint64 `json:"seq,omitempty"`
}

// FinishState is the delivery ledger of one status's finish: one slot per
// status, so a give-up (interrupted) and a later real result are both
// delivered, each at most once on the happy path.
type FinishState struct {
	Slot
	// The outcome as it was at the transition (the row may move on).
	Reason            string `json:"reason,omitempty"`
	Error             string `json:"error,omitempty"`
	ChildStillRunning bool   `json:"childStillRunning,omitempty"`
	// UnservedSince is set when no deliverer has taken the finish for a
	// while and none follows its handler. A deliverer's claim clears it.
	UnservedSince time.Time `json:"unservedSince,omitzero"`
	// Ending counts the run's earlier endings with this status whose slot
	// this one took over: 0 for the first, 1 when a resumed run was given
	// up again, and so on. It is the finish message's ending.
	Ending int `json:"ending,omitempty"`
	// Resumed says the run was resumed after this ending: the run's next
	// ending with this status takes the slot over.
	Resumed bool `json:"resumed,omitempty"`
}

// NoticeState is the delivery ledger of one milestone notice: one slot per
// (run, milestone name), filled by the run's first milestone of that name,
// so the handler hears each listed milestone once (at least once under a
// crash, like a finish).
type NoticeState struct {
	Slot
	// Milestone is the milestone announced (the first of its name).
	Milestone events.Milestone `json:"milestone"`
	// DeliveredAt is set once the handler accepted the notice.
	DeliveredAt time.Time `json:"deliveredAt,omitzero"`
}

// ChargeMark names one charge of a run's usage to a tree total (a row's
// TreeUsage): the charging run, its attempt, and the charge's sequence
// among that attempt's charges to that row (1, 2, …). The charged row
// keeps the marks of the latest charges it took (Row.ChargeMarks), so a
// charge sent again after its answer was lost is taken once.
type ChargeMark struct {
	Run     string `json:"run"`
	Attempt int    `json:"attempt"`
	Seq     uint64 `json:"seq"`
}
