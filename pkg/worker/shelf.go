package worker

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jetrun/jetrun/internal/engine/holding"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/settle"
)

// A waiting run costs nothing while it waits (docs/leases.md, "A waiting
// run costs nothing"). A run parked (Run.Park, Run.Wait, a call's reply, a
// nested run) since before the last beat has its dispatch *shelved* by the
// heart instead of heartbeat: its shelf entry is written (runstore.Shelf:
// the worker, its epoch, the attempt and the delivery's acknowledgement
// subject), then the delivery is refused with a delay of shelfDelay. The
// server keeps it pending on its consumer, so nothing is sent for the run
// until it ends, when its delivery is settled as before and its entry
// removed, apart from one refusal every shelfDelay/2.
//
// If the worker dies, the server would bring the dispatch back only after
// shelfDelay. Every worker therefore follows the liveness keys
// (keepShelves): when a worker's key lapses and the worker does not answer
// on its holds subject (holding.go), or another incarnation holds its id,
// it lists that worker's entries of that epoch and refuses each delivery
// at once through its acknowledgement subject; the server redelivers it
// and the run is taken over as after any lost worker, about a lease and a
// beat after the death. A starting worker does the same for every entry
// whose holder is gone (a worker that died while none other lived).

// shelfDelay is how long a shelved delivery stays pending without a word:
// a backstop should every other worker miss its holder's death; its
// holder refuses it again every half of it.
const shelfDelay = time.Hour

// maxShelvePerBeat bounds the runs one beat shelves, so a beat stays short
// when thousands of runs park at once; the others go on being heartbeat
// and are shelved at the next beats.
const maxShelvePerBeat = 20_000

// shelveChunk is how many shelf entries are written in one pipeline.
const shelveChunk = 1_000

// shelvable reports whether the heart shelves e's dispatch at this beat:
// the handler has been parked for half a beat or more, and the worker's
// liveness is in good standing (a worker renewing in trouble keeps its
// dispatches beating, as it keeps them when it lapses).
func (w *Worker) shelvable(e *execution, now time.Time, beatEvery time.Duration) bool {
	since := e.parking.parkedSince()
	return !since.IsZero() && now.Sub(since) >= beatEvery/2 && !e.dlv.isShelved() && !w.recovering()
}

// quiet reports, without taking a lock, whether e's dispatch is shelved
// and its handler parked: the heart then has nothing to send for it, and
// it may rest (rest.go).
func (e *execution) quiet() bool { return e.dlv.isShelf.Load() && e.parking.isIn.Load() }

// shelveAside shelves es in a goroutine of the heart's: writing thousands
// of entries must never hold the heart past a renewal. The heart calls it
// only at a beat that took the shelving turn (takeShelvingTurn) before it
// chose es, and must call it then, with no runs too: it gives the turn
// back once es are shelved.
func (w *Worker) shelveAside(ctx context.Context, es []*execution) {
	if len(es) == 0 {
		w.shelving.Store(false)
		return
	}
	w.beats.Go(func() {
		defer w.shelving.Store(false)
		sctx, cancel := context.WithTimeout(ctx, w.cfg.Lease)
		defer cancel()
		w.shelve(sctx, es)
	})
}

// takeShelvingTurn reports whether this beat may choose runs to shelve:
// false while an earlier beat's are still being shelved. Those runs are
// then beaten as any other (they are shelved at a later beat), and none is
// chosen twice: a run chosen while its first shelving was on its way had
// its entry written again and then removed by the shelving that found it
// shelved already, leaving a shelved dispatch with no entry, which no
// other worker could bring back when this one died.
func (w *Worker) takeShelvingTurn() bool { return w.shelving.CompareAndSwap(false, true) }

// shelve shelves the dispatches of es, waiting runs: their entries first,
// then the delayed refusals, so a worker that dies in between leaves
// dispatches that come back after their AckWait, as unshelved ones do.
func (w *Worker) shelve(ctx context.Context, es []*execution) {
	for len(es) > 0 && ctx.Err() == nil {
		n := min(len(es), shelveChunk)
		w.shelveChunk(ctx, es[:n])
		es = es[n:]
	}
}

func (w *Worker) shelveChunk(ctx context.Context, es []*execution) {
	// A run shelved already keeps its entry: writing it again and then
	// removing it (its shelving below refused) would leave a shelved
	// dispatch no other worker can bring back.
	es = slices.DeleteFunc(slices.Clone(es), func(e *execution) bool { return e.dlv.isShelved() })
	entries := make([]runstore.Shelved, len(es))
	for i, e := range es {
		entries[i] = runstore.Shelved{Worker: w.cfg.ID, RunID: e.id, Epoch: e.epoch, Attempt: e.attempt, Reply: e.dlv.reply()}
	}
	errs := w.store.Shelf().Put(ctx, entries)
	now := time.Now()
	for i, e := range es {
		if errs[i] != nil {
			// Heartbeat on; shelved at a later beat.
			w.logs.Log(ctx, w.log, slog.LevelWarn, "shelve", "shelve a waiting run's dispatch; heartbeating it meanwhile",
				"run_id", e.id, "err", errs[i])
			continue
		}
		if !e.dlv.shelve(w.js.Conn(), now, entries[i]) {
			e.unshelve(entries[i]) // it ended meanwhile, or the refusal was not sent
		}
	}
}

// unshelve removes entry, the shelf entry of an attempt whose deliveries
// were settled (unless a later attempt wrote the key again). A removal
// that fails leaves an entry another worker drops once this one is gone
// (its delivery is settled: a refusal changes nothing).
func (e *execution) unshelve(entry runstore.Shelved) {
	ctx, cancel := writeContext()
	defer cancel()
	if err := e.w.store.Shelf().Remove(ctx, entry); err != nil {
		e.w.logs.Log(ctx, e.log, slog.LevelWarn, "unshelve", "remove a waiting run's shelf entry", "err", err)
	}
}

// holderEpoch is one incarnation of a worker.
type holderEpoch struct{ worker, epoch string }

// keepShelves follows every worker's liveness key and takes up the shelved
// runs of the workers that are gone: at start, every entry whose holder's
// key is not live; then, every beat, the workers whose key lapsed or
// changed since the last beat, until their entries are taken up or they
// are back.
func (w *Worker) keepShelves(ctx context.Context) {
	var ww *runstore.WorkerWatch
	bo := jsfault.NewBackOff(time.Second)
	for ww == nil {
		wctx, cancel := context.WithTimeout(ctx, w.cfg.Lease)
		var err error
		ww, err = w.store.Workers().Watch(wctx)
		cancel()
		if err != nil {
			w.logs.Log(ctx, w.log, slog.LevelWarn, "follow liveness", "follow the workers' liveness keys; retrying", "err", err)
			if jsfault.Sleep(ctx, bo.NextBackOff()) != nil {
				return
			}
		}
	}
	defer ww.Stop()
	// known: the incarnations seen alive, or holding entries; one that is
	// no longer live moves to lost, until its entries are taken up.
	known, lost := map[holderEpoch]bool{}, map[holderEpoch]bool{}
	scanned := false
	tick := time.NewTicker(w.cfg.Lease / 3)
	defer tick.Stop()
	for {
		live := ww.Live()
		for id, epoch := range live {
			known[holderEpoch{id, epoch}] = true
		}
		if !scanned {
			scanned = w.scanShelves(ctx, known)
		}
		for h := range known {
			if live[h.worker] != h.epoch {
				lost[h] = true
				delete(known, h)
			}
		}
		for h := range lost {
			if w.takeUpShelved(ctx, ww, h) {
				delete(lost, h)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scanShelves adds to known every worker incarnation holding shelf
// entries (the next step finds those whose key is not live); false when
// the entries could not be listed.
func (w *Worker) scanShelves(ctx context.Context, known map[holderEpoch]bool) bool {
	lctx, cancel := context.WithTimeout(ctx, w.cfg.Lease)
	defer cancel()
	entries, err := w.store.Shelf().List(lctx, "")
	if err != nil {
		w.logs.Log(ctx, w.log, slog.LevelWarn, "list shelf", "list shelved runs; retrying", "err", err)
		return false
	}
	for _, en := range entries {
		known[holderEpoch{en.Worker, en.Epoch}] = true
	}
	return true
}

// takeUpShelved has the shelved dispatches of h redelivered when h is gone,
// and reports whether there is nothing more to do for h: it is back, or its
// entries are taken up. A worker whose key lapsed may live on (an outage,
// a reconnect): one that answers on its holds subject hands its runs off
// itself (a lapse stops its attempts), and is asked again next beat.
func (w *Worker) takeUpShelved(ctx context.Context, ww *runstore.WorkerWatch, h holderEpoch) bool {
	if h.worker == w.cfg.ID && h.epoch == w.epoch() {
		return true // this process: a lapse hands its runs off (handOffLapsed)
	}
	epoch, alive := ww.Key(h.worker)
	if alive && epoch == h.epoch {
		return true
	}
	lctx, cancel := context.WithTimeout(ctx, w.cfg.Lease)
	defer cancel()
	all, err := w.store.Shelf().List(lctx, h.worker)
	if err != nil {
		return false
	}
	var entries []runstore.Shelved
	for _, en := range all {
		if en.Epoch == h.epoch {
			entries = append(entries, en)
		}
	}
	if len(entries) == 0 {
		return true
	}
	if epoch == "" || epoch == h.epoch {
		// Its key lapsed or was released: the process may live on.
		if w.recovering() {
			return false // this worker saw the same outage: give it a lease
		}
		ids := make([]string, 0, min(len(entries), holding.MaxRuns))
		for _, en := range entries[:min(len(entries), holding.MaxRuns)] {
			ids = append(ids, en.RunID)
		}
		qctx, qcancel := context.WithTimeout(ctx, holderQuestionTimeout)
		_, err := holding.Ask(qctx, w.js.Conn(), w.ns.WorkerSubject(h.worker), ids)
		qcancel()
		if err == nil {
			return false // it lives: it hands its runs off itself
		}
	}
	nc := w.js.Conn()
	taken := 0
	for _, en := range entries {
		if err := settle.Retry(0).ApplyReply(nc, en.Reply); err != nil {
			return false
		}
		taken++
		if err := w.store.Shelf().Remove(lctx, en); err != nil {
			return false
		}
	}
	w.log.InfoContext(ctx, "lost worker's waiting runs redelivered", "worker", h.worker, "runs", taken)
	return true
}
