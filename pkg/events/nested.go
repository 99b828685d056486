package events

import (
	"encoding/json"
	"time"
)

// Kinds of event for nested runs and child→parent calls, on the run's own
// subjects (jetrun.run.<id>.<kind>).
const (
	// KindChildChunk is a chunk of a nested run forwarded onto its parent's
	// timeline (ChildChunk): never one of the parent's own chunks.
	KindChildChunk = "child-chunk"
	// KindCall is a call a run makes to its caller (Call).
	KindCall = "call"
	// KindReply is the answer to a call (Reply).
	KindReply = "reply"
)

// ChildChunk is a nested run's chunk shown on its parent's timeline, on
// jetrun.run.<parentId>.child-chunk, published with Nats-Msg-Id
// <parentId>.cc.<childRunId>.<seq>. Seq is the chunk's sequence in the
// child run.
type ChildChunk struct {
	RunID      string          `json:"runId"`
	ChildRunID string          `json:"childRunId"`
	Seq        int64           `json:"seq"`
	Data       json.RawMessage `json:"data"`
	Attempt    int             `json:"attempt,omitempty"`
}

// Call is a request a run makes to its caller, on jetrun.run.<id>.call,
// published with Nats-Msg-Id <runId>.call.<seq>. Seq numbers the run's
// calls 1, 2, 3… in the order its handler makes them (each attempt makes
// them again in the same order, and finds the calls and replies stored by
// earlier attempts). Parent and ParentToolCallID come from the run's row,
// so a call handler knows whose call it is.
type Call struct {
	RunID string `json:"runId"`
	Seq   int64  `json:"seq"`
	Name  string `json:"name"`
	// Key identifies the call across attempts: the name, a hash of the
	// input and how many such calls the attempt made before.
	Key              string          `json:"key,omitempty"`
	Input            json.RawMessage `json:"input,omitempty"`
	AgentType        string          `json:"agentType,omitempty"`
	Parent           string          `json:"parent,omitempty"`
	ParentToolCallID string          `json:"parentToolCallId,omitempty"`
	// TimeoutMs is how long the run waits for the reply (0: no limit).
	TimeoutMs int64     `json:"timeoutMs,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	At        time.Time `json:"at"`
}

// Reply answers call Seq of run RunID, on jetrun.run.<id>.reply, published
// with Nats-Msg-Id <runId>.reply.<seq>. Exactly one of Output and Error is
// meaningful: Error set means the call handler failed (the run gets an
// error value and goes on). The first reply stored for a call is the
// answer; later ones are ignored.
type Reply struct {
	RunID  string          `json:"runId"`
	Seq    int64           `json:"seq"`
	Name   string          `json:"name"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// By names who answered (a process or service), for the timeline.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// MaxCallBytes bounds a call's input and a reply's output.
const MaxCallBytes = 256 << 10
