package model

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/jetrun/jetrun/internal/engine/jsonenc"
)

// EncodeRow writes r as json.Marshal does, byte for byte, without
// reflection for the fields a run's row usually has (strings, numbers,
// times, its input and output); the nested ones (ledgers, usage, budgets)
// are written by Marshal. Every short run writes its row at least once.
func EncodeRow(r *Row) ([]byte, error) {
	e := rowEncoder{b: append(make([]byte, 0, 512), '{')}
	e.str(`"id":`, r.ID)
	e.str(`,"agentType":`, r.AgentType)
	if r.Parent != "" {
		e.str(`,"parent":`, r.Parent)
	}
	if r.ParentToolCallID != "" {
		e.str(`,"parentToolCallId":`, r.ParentToolCallID)
	}
	if r.DisplayOrder != 0 {
		e.int(`,"displayOrder":`, int64(r.DisplayOrder))
	}
	if r.Depth != 0 {
		e.int(`,"depth":`, int64(r.Depth))
	}
	if len(r.Input) != 0 {
		e.rawMessage(`,"input":`, r.Input)
	}
	if r.Detached != nil {
		e.value(`,"detached":`, r.Detached)
	}
	if r.TraceParent != "" {
		e.str(`,"traceparent":`, r.TraceParent)
	}
	if r.TraceState != "" {
		e.str(`,"tracestate":`, r.TraceState)
	}
	e.str(`,"status":`, string(r.Status))
	if r.Reason != "" {
		e.str(`,"reason":`, r.Reason)
	}
	if r.Error != "" {
		e.str(`,"error":`, r.Error)
	}
	if r.Retryable {
		e.raw(`,"retryable":`, "true")
	}
	if r.ChildStillRunning {
		e.raw(`,"childStillRunning":`, "true")
	}
	if r.Summary != "" {
		e.str(`,"summary":`, r.Summary)
	}
	if len(r.Output) != 0 {
		e.rawMessage(`,"output":`, r.Output)
	}
	if r.Progress != nil {
		e.value(`,"progress":`, r.Progress)
	}
	if r.Milestones != 0 {
		e.int(`,"milestones":`, int64(r.Milestones))
	}
	if r.LastMilestone != "" {
		e.str(`,"lastMilestone":`, r.LastMilestone)
	}
	if r.Chunks != 0 {
		e.int(`,"chunks":`, int64(r.Chunks))
	}
	if r.Attempt != 0 {
		e.int(`,"attempt":`, int64(r.Attempt))
	}
	if r.Handoffs != 0 {
		e.int(`,"handoffs":`, int64(r.Handoffs))
	}
	if r.HandedOff != 0 {
		e.int(`,"handedOff":`, int64(r.HandedOff))
	}
	if len(r.Blinks) != 0 {
		e.value(`,"blinks":`, r.Blinks)
	}
	if r.Worker != "" {
		e.str(`,"worker":`, r.Worker)
	}
	if r.WorkerEpoch != "" {
		e.str(`,"workerEpoch":`, r.WorkerEpoch)
	}
	if !r.LeaseUntil.IsZero() {
		e.time(`,"leaseUntil":`, r.LeaseUntil)
	}
	if r.WaitingFor != "" {
		e.str(`,"waitingFor":`, r.WaitingFor)
	}
	if len(r.SignalsSeen) != 0 {
		e.value(`,"signalsSeen":`, r.SignalsSeen)
	}
	if r.CancelRequested {
		e.raw(`,"cancelRequested":`, "true")
	}
	if r.CancelReason != "" {
		e.str(`,"cancelReason":`, r.CancelReason)
	}
	if r.Teardown {
		e.raw(`,"teardown":`, "true")
	}
	if len(r.Delivered) != 0 {
		e.value(`,"delivered":`, r.Delivered)
	}
	if len(r.Finishes) != 0 {
		e.value(`,"finishes":`, r.Finishes)
	}
	if len(r.Notices) != 0 {
		e.value(`,"notices":`, r.Notices)
	}
	if r.Redispatches != 0 {
		e.int(`,"redispatches":`, int64(r.Redispatches))
	}
	if r.DispatchSeq != 0 {
		e.uint(`,"dispatchSeq":`, r.DispatchSeq)
	}
	e.time(`,"createdAt":`, r.CreatedAt)
	if !r.StartedAt.IsZero() {
		e.time(`,"startedAt":`, r.StartedAt)
	}
	if !r.LastSignalAt.IsZero() {
		e.time(`,"lastSignalAt":`, r.LastSignalAt)
	}
	if !r.FinishedAt.IsZero() {
		e.time(`,"finishedAt":`, r.FinishedAt)
	}
	if !r.ReadyAt.IsZero() {
		e.time(`,"readyAt":`, r.ReadyAt)
	}
	if r.Unindexed {
		e.raw(`,"unindexed":`, "true")
	}
	if r.ConcurrencyKey != "" {
		e.str(`,"concurrencyKey":`, r.ConcurrencyKey)
	}
	if r.Strategy != "" {
		e.str(`,"strategy":`, string(r.Strategy))
	}
	if r.DebounceMs != 0 {
		e.int(`,"debounceMs":`, int64(r.DebounceMs))
	}
	if r.Session != "" {
		e.str(`,"session":`, r.Session)
	}
	if r.Tenant != "" {
		e.str(`,"tenant":`, r.Tenant)
	}
	if !r.NotBefore.IsZero() {
		e.time(`,"notBefore":`, r.NotBefore)
	}
	if r.SubmitSeq != 0 {
		e.uint(`,"submitSeq":`, r.SubmitSeq)
	}
	if r.SupersededBy != "" {
		e.str(`,"supersededBy":`, r.SupersededBy)
	}
	if r.MergedInto != "" {
		e.str(`,"mergedInto":`, r.MergedInto)
	}
	if len(r.Merged) != 0 {
		e.value(`,"merged":`, r.Merged)
	}
	if r.Usage != nil {
		e.value(`,"usage":`, r.Usage)
	}
	if r.StepUsage != nil {
		e.value(`,"stepUsage":`, r.StepUsage)
	}
	if r.Root != "" {
		e.str(`,"root":`, r.Root)
	}
	if len(r.BudgetFrom) != 0 {
		e.value(`,"budgetFrom":`, r.BudgetFrom)
	}
	if r.Budget != nil {
		e.value(`,"budget":`, r.Budget)
	}
	if r.TreeUsage != nil {
		e.value(`,"treeUsage":`, r.TreeUsage)
	}
	if r.TreeRuns != 0 {
		e.int(`,"treeRuns":`, int64(r.TreeRuns))
	}
	if len(r.ChargeMarks) != 0 {
		e.value(`,"chargeMarks":`, r.ChargeMarks)
	}
	if r.Overrun != nil {
		e.value(`,"overrun":`, r.Overrun)
	}
	if len(r.Holds) != 0 {
		e.value(`,"holds":`, r.Holds)
	}
	if r.FirstEventSeq != 0 {
		e.uint(`,"firstEventSeq":`, r.FirstEventSeq)
	}
	if r.ForkedFrom != nil {
		e.value(`,"forkedFrom":`, r.ForkedFrom)
	}
	if e.err != nil {
		return json.Marshal(r) // its error
	}
	return append(e.b, '}'), nil
}

// errTimeOutOfRange stops an encoding that Marshal refuses: EncodeRow
// then returns Marshal's own error.
var errTimeOutOfRange = errors.New("time out of range")

// rowEncoder appends a row's fields; the first failure stops it.
type rowEncoder struct {
	b   []byte
	err error
}

func (e *rowEncoder) key(k string) { e.b = append(e.b, k...) }

func (e *rowEncoder) str(k, v string) {
	e.key(k)
	e.b = jsonenc.String(e.b, v)
}

func (e *rowEncoder) int(k string, v int64) {
	e.key(k)
	e.b = jsonenc.Int(e.b, v)
}

func (e *rowEncoder) uint(k string, v uint64) {
	e.key(k)
	e.b = jsonenc.Uint(e.b, v)
}

func (e *rowEncoder) raw(k, v string) {
	e.key(k)
	e.b = append(e.b, v...)
}

func (e *rowEncoder) time(k string, v time.Time) {
	e.key(k)
	var ok bool
	if e.b, ok = jsonenc.Time(e.b, v); !ok && e.err == nil {
		e.err = errTimeOutOfRange
	}
}

func (e *rowEncoder) rawMessage(k string, v json.RawMessage) {
	e.key(k)
	var err error
	if e.b, err = jsonenc.Raw(e.b, v); err != nil && e.err == nil {
		e.err = err
	}
}

func (e *rowEncoder) value(k string, v any) {
	e.key(k)
	var err error
	if e.b, err = jsonenc.Value(e.b, v); err != nil && e.err == nil {
		e.err = err
	}
}
