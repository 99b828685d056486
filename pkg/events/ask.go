package events

import (
	"encoding/json"
	"time"
)

// Ask kinds: what a person is asked (Ask.Kind).
const (
	// AskApprove asks for a yes or no; the answer is {"approved": bool}
	// (with an optional "comment").
	AskApprove = "approve"
	// AskChoose asks for one of Ask.Choices; the answer is
	// {"choice": "<one of them>"}.
	AskChoose = "choose"
	// AskForm asks for a value matching Ask.Schema (any JSON value when it
	// has none).
	AskForm = "form"
)

// Ask statuses (Ask.Status).
const (
	// AskOpen: the run waits for an answer.
	AskOpen = "open"
	// AskAnswered: someone answered (Ask.Answer); the answer reaches the
	// run once, even across crashes (Answer.DeliveredAt once it did).
	AskAnswered = "answered"
	// AskClosed: the wait ended without an answer through the ask (the
	// run was cancelled or ended, the wait timed out); ClosedReason says
	// why.
	AskClosed = "closed"
)

// How an ask's answer reaches its run (Ask.Via).
const (
	// AskViaSignal: the answer is sent as the signal Ask.Name
	// (worker.Run.Wait).
	AskViaSignal = "signal"
	// AskViaCall: the answer is the reply to call Ask.CallSeq
	// (worker.Run.Call).
	AskViaCall = "call"
	// AskViaDispatch: the answer approves or refuses a dispatch that
	// waits on the ask itself (a delegation from another service that
	// needs approval); nothing is sent to the run.
	AskViaDispatch = "dispatch"
)

// Ask is a question a run waits on a person to answer, stored in the asks
// bucket (jetrun_asks) under its ID: <runId>.s.<signal>.<seen> for a
// signal wait (seen: the sequence of the last such signal the run had
// received, so a takeover that waits again finds the same ask), and
// <runId>.c.<seq> for a call. Digest is the sha256 of Payload's canonical
// JSON ("sha256:<hex>"): an answer names the digest it saw, and one given
// for a payload that changed since is refused.
type Ask struct {
	ID        string `json:"id"`
	RunID     string `json:"runId"`
	TreeID    string `json:"treeId"`
	AgentType string `json:"agentType"`
	Kind      string `json:"kind"`
	// Via and Name say how the answer reaches the run: the signal Name,
	// or the reply to call CallSeq (named Name).
	Via     string `json:"via"`
	Name    string `json:"name"`
	CallSeq int64  `json:"callSeq,omitempty"`
	// After, for a signal, is the sequence of the last signal Name the run
	// had received when it began to wait: the first one stored after it
	// answers the wait.
	After uint64 `json:"after,omitempty"`
	// Title is a line saying what is asked.
	Title   string          `json:"title,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Choices []string        `json:"choices,omitempty"`
	Schema  json.RawMessage `json:"schema,omitempty"`
	Digest  string          `json:"digest"`
	AskedAt time.Time       `json:"askedAt"`
	// Deadline, if set, is when Default is given as the answer, by
	// "deadline", if no one answered before.
	Deadline *time.Time      `json:"deadline,omitempty"`
	Default  json.RawMessage `json:"default,omitempty"`
	Status   string          `json:"status"`
	Answer   *AskAnswer      `json:"answer,omitempty"`
	// ClosedAt and ClosedReason are set once the ask is closed (or, for
	// an answered one, once its run got the answer and went on).
	ClosedAt     *time.Time `json:"closedAt,omitempty"`
	ClosedReason string     `json:"closedReason,omitempty"`
	// NotifiedAt is when the new-ask hook (JETRUN_ASK_WEBHOOK) took the
	// ask.
	NotifiedAt *time.Time `json:"notifiedAt,omitempty"`
	// Notified is when each named Go hook (finish.AskNotifier) took the
	// ask, by the hook's name.
	Notified map[string]time.Time `json:"notified,omitempty"`
}

// AskAnswer is the answer an ask got: the value the run receives, who gave
// it (a token's name, a caller, "signal" for a signal sent to the run
// directly, "deadline" for the default outcome), when, and the digest of
// the payload it answered.
type AskAnswer struct {
	Value  json.RawMessage `json:"value"`
	By     string          `json:"by"`
	At     time.Time       `json:"at"`
	Digest string          `json:"digest"`
	// DeliveredAt is when the answer was on its way to the run for good
	// (the signal stored, the reply stored).
	DeliveredAt *time.Time `json:"deliveredAt,omitempty"`
}
