package runview

import (
	"context"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/kv"
	"log/slog"
	"maps"
	"slices"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
)

// ledger is what the view trusts of one run's finishes: those jetrun's
// transitions recorded on the run's row while the view saw it not final,
// and which of them it saw delivered. A credential that may write rows
// (the child's) can make a row say anything, but jetrun records no new
// finish on a final row and never leaves a final status: once the view has
// seen the run final, a later rewrite of its row adds nothing here.
type ledger struct {
	final     bool                  // seen final: sealed
	handler   string                // the run's finish handler, "" for none
	endings   map[events.Status]int // the finishes recorded: status → ending
	delivered map[events.Status]int // status → ending+1 of the ending seen delivered
}

// note records what row r says, as far as the ledger still takes it.
func (l *ledger) note(r *jetruntype.Run) {
	if !l.final {
		l.handler, l.endings = "", nil
		if r.Detached != nil {
			l.handler = r.Detached.OnFinish
		}
		for s, fs := range r.Finishes {
			if l.endings == nil {
				l.endings = make(map[events.Status]int, len(r.Finishes))
			}
			l.endings[s] = fs.Ending
		}
		l.final = r.Status.Final()
	}
	for s := range r.Delivered {
		if e, ok := l.endings[s]; ok && r.Finishes[s] != nil && r.Finishes[s].Ending == e {
			if l.delivered == nil {
				l.delivered = make(map[events.Status]int, 1)
			}
			l.delivered[s] = e + 1
		}
	}
}

// noteLocked records row r of run id (nil: the row was removed) in the
// ledgers. A run gets a ledger once it has a finish handler or is final;
// v.mu is held.
func (v *View) noteLocked(id string, r *jetruntype.Run) {
	if r == nil {
		delete(v.ledgers, id)
		return
	}
	l := v.ledgers[id]
	if l == nil {
		if !r.Status.Final() && (r.Detached == nil || r.Detached.OnFinish == "") {
			return
		}
		l = &ledger{}
		v.ledgers[id] = l
	}
	l.note(r)
}

// Vouch says whether a transition of jetrun owes finish f (a
// finish.Config.Vouch): nil when the view saw the run's row record it, an
// error wrapping finish.ErrNotOwed when the run's transitions recorded no
// such finish (its row was rewritten after the view saw it end: the finish
// handler, a status, an ending, a delivery mark removed), or another error
// when it cannot tell yet. A run whose row is gone (cleared) is left to
// the deliverer.
//
// It judges only once the view has taken in the run's row at least as new
// as the one the bucket's leader has: a view behind it would refuse a
// finish whose transition it has not seen yet. (The bucket's newest
// revision cannot tell that: in a leader election a replica that is behind
// answers it.) A view whose watch does not get there within syncTimeout
// takes the leader's row as it is, as it takes the rows it finds when it
// starts or reloads: the finishes a row records before the view sees its
// run final are the run's.
//
// The runs bucket keeps one revision per key, so a watch that lags skips
// the revisions overwritten before it read them: a row rewritten before
// the view took in the final row it replaced is judged as if it were that
// final row. The ledger seals what the view saw, not what it missed.
func (v *View) Vouch(ctx context.Context, f finish.Result) error {
	row, rev, err := v.latest(ctx, f.RunID)
	if errors.Is(err, kv.ErrRunNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("runview: vouch for a finish of run %s: %w", f.RunID, err)
	}
	caught := v.await(ctx, func() bool { return v.seen[f.RunID] >= rev })
	if !caught {
		if ctx.Err() != nil {
			return fmt.Errorf("runview: vouch for a finish of run %s: %w", f.RunID, ctx.Err())
		}
		v.logs.Log(ctx, v.log, slog.LevelWarn, "vouch-behind", "the runs watch is behind the bucket's leader; "+
			"a finish is judged with the row the leader has", "run_id", f.RunID, "revision", rev)
		v.observe(f.RunID, row, rev)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	l := v.ledgers[f.RunID]
	_, present := v.runs[f.RunID]
	newer := v.seen[f.RunID] > rev // the view took in a row written after the one read
	switch {
	case caught && !present: // removed since the leader's read
		return nil
	case l == nil || l.handler == "":
		return fmt.Errorf("%w: run %s was given no finish handler", finish.ErrNotOwed, f.RunID)
	case l.handler != f.Handler:
		return fmt.Errorf("%w: run %s finishes to handler %q, not %q", finish.ErrNotOwed, f.RunID, l.handler, f.Handler)
	}
	if e, ok := l.endings[f.Status]; !ok || e != f.Ending {
		return fmt.Errorf("%w: run %s ended %v; no transition recorded its %s ending %d",
			finish.ErrNotOwed, f.RunID, endingsOf(l), f.Status, f.Ending+1)
	}
	if _, marked := row.Delivered[f.Status]; l.delivered[f.Status] == f.Ending+1 && !marked {
		if newer {
			// The mark may be younger than the row read (a second copy of
			// the finish, read while the first was being delivered): not a
			// removal. Asked again, the newest row tells.
			return fmt.Errorf("runview: vouch for a finish of run %s: its row changed since revision %d was read; "+
				"judged again", f.RunID, rev)
		}
		return fmt.Errorf("%w: run %s's %s finish was delivered; its row no longer says so", finish.ErrNotOwed, f.RunID, f.Status)
	}
	return nil
}

// observe takes in row r of run id at revision rev, read from the bucket's
// leader, unless the view has taken in that revision or a newer one.
func (v *View) observe(id string, r *jetruntype.Run, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if rev > v.seen[id] {
		v.noteLocked(id, r)
		v.seen[id] = rev
	}
}

// endingsOf lists l's finishes for a refusal's reason.
func endingsOf(l *ledger) []string {
	var out []string
	for s, e := range l.endings {
		out = append(out, fmt.Sprintf("%s#%d", s, e+1))
	}
	slices.Sort(out)
	return out
}

// clone returns a copy of l that notes without changing l.
func (l *ledger) clone() *ledger {
	c := *l
	c.endings, c.delivered = maps.Clone(l.endings), maps.Clone(l.delivered)
	return &c
}

// reloaded is the ledger of run id as a reload of the bucket finds row r:
// a run the view had seen final stays sealed. l is the ledger the reload
// built so far (nil if none); v.mu is not held.
func (v *View) reloaded(id string, r *jetruntype.Run, l *ledger) *ledger {
	if l == nil {
		v.mu.RLock()
		old := v.ledgers[id]
		v.mu.RUnlock()
		switch {
		case old != nil && old.final:
			l = old.clone()
		case r.Status.Final() || r.Detached != nil && r.Detached.OnFinish != "":
			l = &ledger{}
		default:
			return nil
		}
	}
	l.note(r)
	return l
}
