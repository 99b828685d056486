package jetruntype

import (
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// Delivery is how the delivery of one finish or milestone notice to a
// detached run's handler goes.
type Delivery struct {
	// DueAt is when the finish or notice became owed.
	DueAt time.Time `json:"dueAt"`
	// Attempts counts handler invocations.
	Attempts int `json:"attempts,omitempty"`
	// LastError is why the last invocation failed, "" when none did.
	LastError string `json:"lastError,omitempty"`
	// FailedAt is set when delivery was given up and the message
	// dead-lettered.
	FailedAt time.Time `json:"failedAt,omitzero"`
}

// FinishDelivery is how the finish owed for one status goes: one per
// status, so a give-up (interrupted) and a later real result are both
// delivered. Run.Delivered says when it was delivered.
type FinishDelivery struct {
	Delivery
	// The outcome as it was when the run ended so (the run may move on).
	Reason            string `json:"reason,omitempty"`
	Error             string `json:"error,omitempty"`
	ChildStillRunning bool   `json:"childStillRunning,omitempty"`
	// UnservedSince is set when no deliverer has taken the finish for a
	// while and none follows its handler; it clears once one takes it.
	UnservedSince time.Time `json:"unservedSince,omitzero"`
	// Ending counts the run's earlier endings with this status (a resumed
	// run given up again): 0 for the first. It is the finish's ending
	// (finish.Result.Ending).
	Ending int `json:"ending,omitempty"`
}

// NoticeDelivery is how the notice of one milestone name goes: the
// handler hears each listed milestone once (its first of that name).
type NoticeDelivery struct {
	Delivery
	// Milestone is the milestone announced.
	Milestone events.Milestone `json:"milestone"`
	// DeliveredAt is set once the handler accepted the notice.
	DeliveredAt time.Time `json:"deliveredAt,omitzero"`
}
