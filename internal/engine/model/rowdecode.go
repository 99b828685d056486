package model

import (
	"strconv"

	"github.com/jetrun/jetrun/internal/engine/jsonenc"
	"github.com/jetrun/jetrun/pkg/events"
)

// DecodeRowFast decodes a stored row into r, which must be zero, without
// reflection for what a row usually holds (strings without escapes,
// numbers, times, its input and output); its nested fields are decoded by
// json.Unmarshal each. It reports false for anything it does not decode
// exactly as json.Unmarshal would (a key in other case, an escape, a
// null…): r is then partly filled, and the caller decodes the row with
// json.Unmarshal into a fresh Row (FuzzDecodeRowFast checks the two agree).
// Every dispatch of a run with a row reads and decodes it.
func DecodeRowFast(data []byte, r *Row) bool {
	return jsonenc.Object(data, func(key, s []byte) ([]byte, bool) {
		switch string(key) {
		case "id":
			return readString(s, &r.ID)
		case "agentType":
			return readString(s, &r.AgentType)
		case "parent":
			return readString(s, &r.Parent)
		case "parentToolCallId":
			return readString(s, &r.ParentToolCallID)
		case "displayOrder":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.DisplayOrder = int(v)
			return rest, ok
		case "depth":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.Depth = int(v)
			return rest, ok
		case "input":
			v, rest, ok := jsonenc.ReadRaw(s)
			r.Input = v
			return rest, ok
		case "detached":
			return jsonenc.ReadValue(s, &r.Detached)
		case "traceparent":
			return readString(s, &r.TraceParent)
		case "tracestate":
			return readString(s, &r.TraceState)
		case "status":
			v, rest, ok := jsonenc.PlainString(s)
			r.Status = events.Status(v)
			return rest, ok
		case "reason":
			return readString(s, &r.Reason)
		case "error":
			return readString(s, &r.Error)
		case "retryable":
			v, rest, ok := jsonenc.ParseBool(s)
			r.Retryable = v
			return rest, ok
		case "childStillRunning":
			v, rest, ok := jsonenc.ParseBool(s)
			r.ChildStillRunning = v
			return rest, ok
		case "summary":
			return readString(s, &r.Summary)
		case "output":
			v, rest, ok := jsonenc.ReadRaw(s)
			r.Output = v
			return rest, ok
		case "progress":
			return jsonenc.ReadValue(s, &r.Progress)
		case "milestones":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.Milestones = int(v)
			return rest, ok
		case "lastMilestone":
			return readString(s, &r.LastMilestone)
		case "chunks":
			v, rest, ok := jsonenc.ParseInt(s, 64)
			r.Chunks = v
			return rest, ok
		case "attempt":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.Attempt = int(v)
			return rest, ok
		case "handoffs":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.Handoffs = int(v)
			return rest, ok
		case "handedOff":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.HandedOff = int(v)
			return rest, ok
		case "blinks":
			return jsonenc.ReadValue(s, &r.Blinks)
		case "worker":
			return readString(s, &r.Worker)
		case "workerEpoch":
			return readString(s, &r.WorkerEpoch)
		case "leaseUntil":
			return jsonenc.ReadTime(s, &r.LeaseUntil)
		case "waitingFor":
			return readString(s, &r.WaitingFor)
		case "signalsSeen":
			return jsonenc.ReadValue(s, &r.SignalsSeen)
		case "cancelRequested":
			v, rest, ok := jsonenc.ParseBool(s)
			r.CancelRequested = v
			return rest, ok
		case "cancelReason":
			return readString(s, &r.CancelReason)
		case "teardown":
			v, rest, ok := jsonenc.ParseBool(s)
			r.Teardown = v
			return rest, ok
		case "delivered":
			return jsonenc.ReadValue(s, &r.Delivered)
		case "finishes":
			return jsonenc.ReadValue(s, &r.Finishes)
		case "notices":
			return jsonenc.ReadValue(s, &r.Notices)
		case "redispatches":
			v, rest, ok := jsonenc.ParseInt(s, strconv.IntSize)
			r.Redispatches = int(v)
			return rest, ok
		case "dispatchSeq":
			v, rest, ok := jsonenc.ParseUint(s)
			r.DispatchSeq = v
			return rest, ok
		case "createdAt":
			return jsonenc.ReadTime(s, &r.CreatedAt)
		case "startedAt":
			return jsonenc.ReadTime(s, &r.StartedAt)
		case "lastSignalAt":
			return jsonenc.ReadTime(s, &r.LastSignalAt)
		case "finishedAt":
			return jsonenc.ReadTime(s, &r.FinishedAt)
		case "readyAt":
			return jsonenc.ReadTime(s, &r.ReadyAt)
		case "unindexed":
			v, rest, ok := jsonenc.ParseBool(s)
			r.Unindexed = v
			return rest, ok
		case "concurrencyKey":
			return readString(s, &r.ConcurrencyKey)
		case "strategy":
			v, rest, ok := jsonenc.PlainString(s)
			r.Strategy = events.Strategy(v)
			return rest, ok
		case "debounceMs":
			v, rest, ok := jsonenc.ParseInt(s, 64)
			r.DebounceMs = v
			return rest, ok
		case "session":
			return readString(s, &r.Session)
		case "tenant":
			return readString(s, &r.Tenant)
		case "notBefore":
			return jsonenc.ReadTime(s, &r.NotBefore)
		case "submitSeq":
			v, rest, ok := jsonenc.ParseUint(s)
			r.SubmitSeq = v
			return rest, ok
		case "supersededBy":
			return readString(s, &r.SupersededBy)
		case "mergedInto":
			return readString(s, &r.MergedInto)
		case "merged":
			return jsonenc.ReadValue(s, &r.Merged)
		case "usage":
			return jsonenc.ReadValue(s, &r.Usage)
		case "stepUsage":
			return jsonenc.ReadValue(s, &r.StepUsage)
		case "root":
			return readString(s, &r.Root)
		case "budgetFrom":
			return jsonenc.ReadValue(s, &r.BudgetFrom)
		case "budget":
			return jsonenc.ReadValue(s, &r.Budget)
		case "treeUsage":
			return jsonenc.ReadValue(s, &r.TreeUsage)
		case "treeRuns":
			v, rest, ok := jsonenc.ParseInt(s, 64)
			r.TreeRuns = v
			return rest, ok
		case "chargeMarks":
			return jsonenc.ReadValue(s, &r.ChargeMarks)
		case "overrun":
			return jsonenc.ReadValue(s, &r.Overrun)
		case "holds":
			return jsonenc.ReadValue(s, &r.Holds)
		case "firstEventSeq":
			v, rest, ok := jsonenc.ParseUint(s)
			r.FirstEventSeq = v
			return rest, ok
		case "forkedFrom":
			return jsonenc.ReadValue(s, &r.ForkedFrom)
		}
		return s, false
	})
}

// readString reads a string without escapes into *dst.
func readString(s []byte, dst *string) ([]byte, bool) {
	v, rest, ok := jsonenc.PlainString(s)
	if ok {
		*dst = string(v)
	}
	return rest, ok
}
