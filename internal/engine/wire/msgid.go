package wire

import (
	"strconv"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// Message ids (Nats-Msg-Id) of the events a run publishes: a publish
// retried within the stream's duplicate window is stored once.

// SignalEventMsgID is the Nats-Msg-Id of a run's signal event.
func SignalEventMsgID(runID string, attempt int, name, state string, n int64) string {
	return runID + ".w." + itoa(int64(attempt)) + "." + name + "." + state + "." + itoa(n)
}

// FinishMsgID is the Nats-Msg-Id, and the idempotency key, of the finish of
// a run for one status: <runId>.<status> for the run's first ending with
// that status, <runId>.<status>.<n> for its n-th (n = ending+1: a run given
// up, resumed by a retry and given up again has <runId>.interrupted.2).
func FinishMsgID(runID string, s events.Status, ending int) string {
	if ending <= 0 {
		return runID + "." + string(s)
	}
	return runID + "." + string(s) + "." + itoa(int64(ending+1))
}

// MilestoneMsgID is the Nats-Msg-Id of a run's milestone with sequence seq.
func MilestoneMsgID(runID string, seq int) string {
	return runID + ".m." + itoa(int64(seq))
}

// StatusMsgID is the Nats-Msg-Id of a status event: one per run, attempt and
// status, so a retried publish is deduplicated.
func StatusMsgID(runID string, attempt int, s events.Status) string {
	return runID + ".s." + itoa(int64(attempt)) + "." + string(s)
}

// ChunkMsgID is the Nats-Msg-Id of a run's chunk with sequence seq.
func ChunkMsgID(runID string, seq int64) string { return runID + ".c." + itoa(seq) }

// ChunkRangeMsgID is the Nats-Msg-Id of a coalesced chunk event carrying
// the run's chunks first … last: ChunkMsgID for a single chunk.
func ChunkRangeMsgID(runID string, first, last int64) string {
	if last <= first {
		return ChunkMsgID(runID, first)
	}
	return runID + ".c." + itoa(first) + "-" + itoa(last)
}

// ProgressMsgID is the Nats-Msg-Id of the n-th progress event of an attempt.
func ProgressMsgID(runID string, attempt int, n int64) string {
	return runID + ".p." + itoa(int64(attempt)) + "." + itoa(n)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ChildChunkMsgID is the Nats-Msg-Id of a forwarded child chunk.
func ChildChunkMsgID(runID, childID string, seq int64) string {
	return runID + ".cc." + childID + "." + itoa(seq)
}

// CallMsgID is the Nats-Msg-Id of call seq of a run.
func CallMsgID(runID string, seq int64) string { return runID + ".call." + itoa(seq) }

// ReplyMsgID is the Nats-Msg-Id of the reply to call seq of a run.
func ReplyMsgID(runID string, seq int64) string { return runID + ".reply." + itoa(seq) }

// MilestoneNoticeMsgID is the Nats-Msg-Id, and the idempotency key, of the
// notice of a run's milestone name.
func MilestoneNoticeMsgID(runID, name string) string { return runID + ".milestone." + name }

// StepMsgID is the Nats-Msg-Id of a run's step named name.
func StepMsgID(runID, name string) string { return runID + ".step." + name }

// StreamEpoch encodes a stream's creation time, so run ids derived from
// stream sequences (DerivedRunID) never repeat across a deleted and
// re-created stream.
func StreamEpoch(created time.Time) string { return strconv.FormatInt(created.UnixMilli(), 36) }

// DerivedRunID is the run id of a dispatch that names none and has no
// usable Nats-Msg-Id: "d<epoch>-<sequence>", from its dispatch stream's
// StreamEpoch and its stream sequence.
func DerivedRunID(epoch string, seq uint64) string {
	return "d" + epoch + "-" + strconv.FormatUint(seq, 10)
}

// StoppedSuffix ends the Nats-Msg-Id of the second interrupted status event
// of an attempt, the one saying its given-up child has stopped:
// StatusMsgID(id, attempt, StatusInterrupted) + StoppedSuffix.
const StoppedSuffix = ".stopped"

// AskSignalMsgID is the Nats-Msg-Id of the signal that carries the answer
// of ask id to its run.
func AskSignalMsgID(askID string) string { return "ask." + askID }
