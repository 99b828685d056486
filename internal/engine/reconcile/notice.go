package reconcile

import (
	"context"
	"errors"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// republishNotices publishes again the milestone notices a run's ledger
// still owes with no delivery under way and no copy waiting in the finish
// stream (a copy lost with the stream's max age, say), paced like finishes.
// A copy that finds the notice delivered is dropped by the deliverer.
func (s *sweep) republishNotices(ctx context.Context, row *jetruntype.Run) error {
	r := s.r
	for _, name := range model.Of(row).PendingNotices() {
		n := row.Notices[name]
		if s.now.Sub(n.DueAt) < r.cfg.Interval || n.ClaimedUntil.After(s.now) {
			continue // the fast path is on it
		}
		if !r.paceOK(row.ID+"/notice/"+name, s.now, r.republishEvery()) {
			continue
		}
		if n.Seq != 0 {
			waiting, err := r.finishWaiting(ctx, n.Seq)
			if err != nil {
				return err
			}
			if waiting {
				continue
			}
		}
		ack, err := r.rt.PublishNotice(ctx, row, name)
		if err != nil || ack == nil {
			return err
		}
		if ack.Sequence != n.Seq {
			if _, _, err := r.store.Mutate(ctx, row.ID, func(run *jetruntype.Run) error {
				return model.Of(run).RecordNoticeSeq(name, ack.Sequence)
			}); err != nil && !errors.Is(err, runstore.ErrRunNotFound) {
				return err
			}
		}
		if !ack.Duplicate {
			s.count(func(st *Stats) { st.Republished++ })
			obs.Report(ctx, r.log, obs.RunRecovered, row.ID, "action", "milestone notice republished", "milestone", name)
		}
	}
	return nil
}
