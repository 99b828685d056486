package model_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// FuzzApply applies random sequences of events to a new run's row and
// checks, after every step, that the row is valid (model.Check) and that:
//   - an event Apply refuses, or that changes nothing, leaves the row as
//     it was, and Apply returns no other errors than its own;
//   - a final status is never left, nor a final row's ending (status,
//     reason, error, attempt) changed, but by FinalRepaired, which restores
//     the run's first ending after someone rewrote it;
//   - a finish is owed (a ledger entry, or a new ending of one) only at a
//     transition into a final status or into interrupted (or by a
//     deliverer's claim of a finish published by hand);
//   - attempts and hand-offs never go down;
//   - an event written with a compare-and-set that may be retried after a
//     lost answer (runstore.Store.Mutate) changes nothing more when applied
//     again to its own result.
//
// The bytes are decoded into events whose fields come from small domains,
// drawn from the row as it is (its holder, a stale one, another worker),
// so that most events apply. The seed corpus is testdata/fuzz/FuzzApply.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte("\x01\x00\x00\x00\x00\x13\x01\x00\x02\x00\x00\x19\x00\x00\x00\x05\x00\x00\x00\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{data: data}
		r := in.newRow()
		if err := model.Check(r); err != nil {
			t.Fatalf("new row: %v", err)
		}
		now := r.CreatedAt
		var ending *events.StatusEvent // the run's first final status, as its event
		for step := 0; step < 100 && in.more(); step++ {
			now = now.Add(time.Duration(in.n(4)) * time.Second)
			ev := in.event(r, ending, now)
			unforged := r.Clone()
			if _, ok := ev.(model.FinalRepaired); ok {
				in.forge(r) // what the repair is for: someone rewrote the row
			}
			before := r.Clone()
			err := model.Apply(r, ev, now)
			if err != nil {
				checkRefusal(t, step, ev, err, r, before)
				r = unforged // a repair that wrote nothing: the row as it was
				continue
			}
			if err := model.Check(r); err != nil {
				t.Fatalf("step %d: %#v on %s:\n%v\nrow: %+v", step, ev, before.Status, err, r)
			}
			checkStep(t, step, ev, before, r)
			if ending == nil && r.Status.Final() {
				ending = &events.StatusEvent{RunID: r.ID, Status: r.Status, Reason: r.Reason, Error: r.Error, Attempt: r.Attempt, At: r.FinishedAt}
			}
			checkRetry(t, step, ev, r, now)
		}
	})
}

// checkRefusal checks that Apply's error is one of its own and that the
// row did not change.
func checkRefusal(t *testing.T, step int, ev model.Event, err error, r, before *model.Row) {
	t.Helper()
	var te *model.TransitionError
	var oe *model.OverrunError
	if !errors.Is(err, model.ErrNoChange) && !errors.As(err, &te) && !errors.As(err, &oe) {
		t.Fatalf("step %d: %#v: unexpected error %v", step, ev, err)
	}
	if !reflect.DeepEqual(r, before) {
		t.Fatalf("step %d: %#v returned %v but changed the row:\n%+v\nwas\n%+v", step, ev, err, r, before)
	}
}

// checkStep checks what a change may do: leave a final status (no), owe
// a finish, count attempts.
func checkStep(t *testing.T, step int, ev model.Event, before, r *model.Row) {
	t.Helper()
	_, repair := ev.(model.FinalRepaired)
	if before.Status.Final() && !repair && (r.Status != before.Status || r.Reason != before.Reason ||
		r.Error != before.Error || r.Attempt != before.Attempt) {
		t.Fatalf("step %d: %#v changed a final row's ending: %s/%s/%q/%d → %s/%s/%q/%d", step, ev,
			before.Status, before.Reason, before.Error, before.Attempt, r.Status, r.Reason, r.Error, r.Attempt)
	}
	if repair && !r.Status.Final() {
		t.Fatalf("step %d: a repair left the row %s", step, r.Status)
	}
	entered := r.Status != before.Status && r.Status.Terminal()
	_, claimed := ev.(model.FinishClaimed)
	for s, fs := range before.Finishes {
		if now := r.Finishes[s]; now == nil || now.Ending < fs.Ending {
			t.Fatalf("step %d: %#v dropped the finish for %s", step, ev, s)
		}
	}
	for s, fs := range r.Finishes {
		was := before.Finishes[s]
		if (was == nil || was.Ending != fs.Ending) && !entered && !claimed {
			t.Fatalf("step %d: %#v owes a finish for %s without a transition into it (%s → %s)", step, ev, s, before.Status, r.Status)
		}
	}
	if (r.Attempt < before.Attempt && !repair) || r.Handoffs < before.Handoffs {
		t.Fatalf("step %d: %#v counted back: attempt %d→%d, handoffs %d→%d", step, ev, before.Attempt, r.Attempt, before.Handoffs, r.Handoffs)
	}
}

// checkRetry applies ev again to its own result, as a compare-and-set
// retried after a lost answer does: it changes nothing more. A claim
// (of a run or of a delivery) is written with a revision-checked update,
// never retried so; RunCounted is not idempotent (see its doc).
func checkRetry(t *testing.T, step int, ev model.Event, r *model.Row, now time.Time) {
	t.Helper()
	switch ev.(type) {
	case model.Claimed, model.FinishClaimed, model.NoticeClaimed, model.RunCounted:
		return
	}
	again := r.Clone()
	if err := model.Apply(again, ev, now); err == nil && !reflect.DeepEqual(again, r) {
		t.Fatalf("step %d: %#v applied twice changed the row again:\n%+v\nafter once\n%+v", step, ev, again, r)
	}
}

// fuzzInput decodes fuzz bytes; past the end it reads zeros.
type fuzzInput struct {
	data []byte
	i    int
}

func (in *fuzzInput) more() bool { return in.i < len(in.data) }

// n returns a number in [0, k).
func (in *fuzzInput) n(k int) int {
	if in.i >= len(in.data) {
		return 0
	}
	b := in.data[in.i]
	in.i++
	return int(b) % k
}

func (in *fuzzInput) flag() bool { return in.n(2) == 1 }

func pick[T any](in *fuzzInput, xs ...T) T { return xs[in.n(len(xs))] }

// newRow is a new run: plain or keyed, attached or detached (with a
// milestone its handler hears of), with a budget or without.
func (in *fuzzInput) newRow() *model.Row {
	d := events.Dispatch{RunID: "r"}
	if in.flag() {
		d.ConcurrencyKey, d.Strategy = "k", pick(in, events.StrategyQueue, events.StrategyMerge, events.StrategyDebounce)
	}
	if in.flag() {
		d.Detached = &events.Detached{OnFinish: "h", OnMilestones: []string{"m"}}
	}
	if in.flag() {
		d.Budget = &events.TreeBudget{Tokens: 10, Runs: 2}
	}
	return model.NewRun("a", d, uint64(in.n(3)), t0)
}

var (
	fuzzStatuses = []events.Status{events.StatusCompleted, events.StatusError, events.StatusAborted, events.StatusInterrupted}
	fuzzReasons  = []string{"", events.ReasonHandlerError, events.ReasonBudgetExceeded, events.ReasonNoProgress, events.ReasonCancelled}
)

// holderOf draws the attempt an attempt's event names: r's holder, an
// earlier attempt of it, another worker, or none.
func (in *fuzzInput) holderOf(r *model.Row) model.Holder {
	switch in.n(5) {
	case 0, 1:
		return model.Holder{Worker: r.Worker, Epoch: pick(in, r.WorkerEpoch, ""), Attempt: r.Attempt}
	case 2:
		return model.Holder{Worker: pick(in, "w1", "w2"), Epoch: "e1", Attempt: r.Attempt - 1}
	case 3:
		return model.Holder{Worker: "w2", Epoch: "e2", Attempt: r.Attempt}
	}
	return model.Holder{}
}

// event draws the next event for r at now; ending is the run's first final
// status (nil while it has none).
func (in *fuzzInput) event(r *model.Row, ending *events.StatusEvent, now time.Time) model.Event {
	by := func() model.Holder { return in.holderOf(r) }
	status := func() events.Status { return pick(in, fuzzStatuses...) }
	switch in.n(38) {
	case 0, 1, 2:
		return model.Claimed{Worker: pick(in, "w1", "w2"), Epoch: pick(in, "e1", "e2"), DispatchSeq: uint64(in.n(4))}
	case 3:
		return model.HandedBack{By: by()}
	case 4:
		return model.Lapsed{By: by()}
	case 5:
		return model.Blinked{Attempt: in.n(4)}
	case 6:
		return model.Retrying{By: by(), Error: "again"}
	case 7, 8:
		s := status()
		return model.Ended{By: by(), Status: s, Reason: pick(in, fuzzReasons...), Error: pick(in, "", "boom"), Summary: "s", Output: json.RawMessage(`{}`)}
	case 9:
		return model.Interrupted{By: by(), Reason: events.ReasonBudgetExceeded, Error: "over"}
	case 10, 11:
		return model.GaveUp{Reason: pick(in, events.ReasonBudgetExceeded, events.ReasonNoProgress, events.ReasonWindowExceeded), Error: "late", Held: in.flag()}
	case 12:
		return model.BudgetStopped{Overrun: jetruntype.Overrun{Owner: pick(in, "root", "r"), Budget: "tokens", Limit: 10, Used: 11}, Held: in.flag()}
	case 13:
		return model.ChildStopped{By: pick(in, model.Holder{}, by())}
	case 14, 15:
		return model.CancelRequested{Reason: pick(in, "user", "parent"), Held: in.flag()}
	case 16, 17:
		return model.Resumed{Queued: in.flag()}
	case 18:
		nb := time.Time{}
		if in.flag() {
			nb = now.Add(time.Minute)
		}
		return model.Queued{NotBefore: nb, SubmitSeq: uint64(in.n(3))}
	case 19:
		var input json.RawMessage
		if r.Strategy == events.StrategyMerge {
			input = json.RawMessage(`[1]`)
		}
		return model.Promoted{Merged: pick(in, []string(nil), []string{"m1"}), Input: input, DispatchSeq: uint64(in.n(3))}
	case 20:
		return model.Superseded{By: "newer"}
	case 21:
		return model.Merged{Into: "carrier"}
	case 22:
		return model.DispatchRecorded{Seq: uint64(1 + in.n(8)), Replace: in.flag()}
	case 23:
		return model.Redispatched{Lost: pick(in, r.DispatchSeq, r.DispatchSeq+1), Seq: r.DispatchSeq + 2 + uint64(in.n(4))}
	case 24:
		return model.WaitingForWorker{Why: pick(in, "nobody", "no worker")}
	case 25:
		return model.Waiting{By: by(), Name: pick(in, "", "approve", "run:c")}
	case 26, 27:
		return in.synced(r, by(), now)
	case 28:
		if ending == nil {
			return model.FinalRepaired{Event: events.StatusEvent{RunID: r.ID, Status: status(), Attempt: r.Attempt, At: now}}
		}
		return model.FinalRepaired{Event: *ending}
	case 29:
		s := pick(in, fuzzStatuses...)
		return model.FinishClaimed{Status: s, Finish: events.Finish{RunID: r.ID, Status: s}, By: "d", Until: now.Add(time.Duration(in.n(3)) * time.Second)}
	case 30:
		return model.FinishDelivered{Status: status(), Ending: in.n(2)}
	case 31:
		return model.FinishReleased{Status: status(), Ending: in.n(2), Cause: pick(in, "", "boom"), Failed: in.flag()}
	case 32:
		return pick[model.Event](in,
			model.FinishSeqRecorded{Status: status(), Seq: uint64(1 + in.n(3))},
			model.FinishUnserved{Status: status()},
			model.UnservedFinishFailed{Status: status(), Reason: "nobody"})
	case 33:
		name := pick(in, "m", "n")
		return pick[model.Event](in,
			model.NoticeOwed{Milestone: events.Milestone{RunID: r.ID, Name: name, Sequence: 1 + in.n(3)}},
			model.NoticeClaimed{Name: name, By: "d", Until: now.Add(time.Second)},
			model.NoticeDelivered{Name: name},
			model.NoticeReleased{Name: name, Cause: "boom", Failed: in.flag()},
			model.NoticeSeqRecorded{Name: name, Seq: uint64(1 + in.n(3))})
	case 35, 36:
		return model.EndedWithoutClaim{Attempt: r.Attempt + pick(in, 1, 0, 2), DispatchSeq: uint64(in.n(4)),
			StartedAt: now.Add(-time.Duration(in.n(3)) * time.Second), Status: status(),
			Reason: pick(in, fuzzReasons...), Error: pick(in, "", "boom"), Summary: "s", Output: json.RawMessage(`{}`)}
	case 34:
		return pick[model.Event](in,
			model.Charged{Mark: model.ChargeMark{Run: pick(in, "r", "c"), Attempt: in.n(3), Seq: uint64(in.n(4))},
				Delta: jetruntype.UsageTotals{InputTokens: int64(in.n(8))}, Settles: []string{pick(in, "r.1.1", "c.2.1")}},
			model.RunCounted{},
			model.Reserved{Hold: model.Hold{ID: pick(in, "r.1.1", "c.2.1", "c.1.2"), Run: pick(in, "r", "c"), Attempt: in.n(3),
				Amount: jetruntype.UsageTotals{InputTokens: int64(in.n(8))}, Until: now.Add(time.Duration(in.n(3)-1) * time.Second)}},
			model.HoldsReleased{Run: pick(in, "r", "c"), Attempt: in.n(3), IDs: pick(in, []string(nil), []string{"c.2.1"})},
			model.HoldsRenewed{Run: pick(in, "r", "c"), Attempt: in.n(3), Until: now.Add(time.Duration(in.n(3)) * time.Second)})
	}
	return model.StepsCounted{Stored: jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{InputTokens: int64(in.n(16))}}}
}

// synced draws an attempt's row sync.
func (in *fuzzInput) synced(r *model.Row, by model.Holder, now time.Time) model.Synced {
	ev := model.Synced{
		By: by, Chunks: int64(in.n(5)), Milestones: in.n(3), LastMilestone: pick(in, "", "m"),
		WaitingFor: pick(in, "", "approve"), FirstEventSeq: uint64(in.n(3)),
	}
	if in.flag() {
		ev.LastSignalAt = now.Add(-time.Duration(in.n(3)) * time.Second)
	}
	if in.flag() {
		ev.Progress = &jetruntype.ProgressSnapshot{Fraction: 0.5, At: now}
	}
	if in.flag() {
		ev.SignalsSeen = map[string]uint64{"approve": uint64(in.n(4))}
	}
	if in.flag() {
		u := jetruntype.Usage{UsageTotals: jetruntype.UsageTotals{InputTokens: int64(in.n(8))}}
		ev.Usage, ev.StepUsage, ev.ChargeSteps = &u, &u, in.flag()
	}
	return ev
}

// forge rewrites r as someone who may write rows without the
// compare-and-set might (what engine.Runtime.RepairFinal is for): its
// status and reason, a holder or a wait left on it. Counters are left
// alone.
func (in *fuzzInput) forge(r *model.Row) {
	if !in.flag() {
		return
	}
	r.Status = pick(in, events.StatusRunning, events.StatusStarting, events.StatusCompleted, events.StatusError)
	r.Reason, r.Error = "forged", "forged"
	if in.flag() {
		r.Worker, r.WorkerEpoch = "w9", "e9"
	}
	if in.flag() {
		r.WaitingFor = "approve"
	}
}
