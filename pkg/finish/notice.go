package finish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Milestone notices.
//
// A detached run dispatched with detached.onMilestones = ["name", ...] owes
// its onFinish handler one notice per listed name, for the first milestone
// of that name the run reaches. Every deliverer follows the durable consumer
// milestone-notices on the events stream (filter jetrun.run.*.milestone):
// for each milestone it records the owed notice on the run's row (its
// notices ledger, by compare-and-set, first milestone of a name only) and
// publishes it to jetrun.finish.<handler> with Nats-Msg-Id
// <runId>.milestone.<name>, then acknowledges the milestone. A deliverer
// killed on the way leaves the milestone unacknowledged: it is redelivered
// and the step is done again (the ledger and the dedup window keep one
// notice). The finish consumer then delivers the notice like a finish:
// claim on the row, call the handler, mark deliveredAt, acknowledge.
//
// So a handler hears each listed milestone of a run exactly once on the
// happy path and at least once under a crash, with the idempotency key
// <runId>.milestone.<name> (NoticeIdempotencyKey); a second milestone of
// the same name is never announced.

// HandleMilestone registers h as the milestone handler of name (the value
// of detached.onFinish). Finishes for name still need Handle, in the
// same deliverer (they share the consumer finish-<name>): without one, a
// finish that reaches this deliverer fails its attempt. It panics on an
// invalid or duplicate name, or after Start.
func (d *Deliverer) HandleMilestone(name string, h MilestoneHandler) {
	if err := events.ValidateToken("handler name", name); err != nil {
		panic("finish: HandleMilestone: " + err.Error())
	}
	if h == nil {
		panic("finish: HandleMilestone: nil handler for " + name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		panic("finish: HandleMilestone called after Start")
	}
	if d.milestones == nil {
		d.milestones = make(map[string]MilestoneHandler)
	}
	if _, dup := d.milestones[name]; dup {
		panic("finish: HandleMilestone: a milestone handler named " + name + " is already registered")
	}
	d.milestones[name] = h
	if _, ok := d.handlers[name]; !ok {
		// The consumer finish-<name> carries both; a finish that reaches
		// this process without a finish handler fails its attempt.
		d.handlers[name] = noFinishHandler{name}
	}
}

// noFinishHandler stands for the finish handler of a name registered with
// HandleMilestone only, until Handle replaces it.
type noFinishHandler struct{ name string }

func (n noFinishHandler) ServeFinish(context.Context, *jetruntype.Run, Result) error {
	return fmt.Errorf("no finish handler %s in this deliverer (only HandleMilestone)", n.name)
}

// HandleMilestoneFunc registers f; see HandleMilestone.
func (d *Deliverer) HandleMilestoneFunc(name string, f func(ctx context.Context, run *jetruntype.Run, n Notice) error) {
	d.HandleMilestone(name, MilestoneHandlerFunc(f))
}

// milestoneHandler is the milestone handler of name, if any.
func (d *Deliverer) milestoneHandler(name string) MilestoneHandler {
	if h, ok := d.milestones[name]; ok {
		return h
	}
	if h, ok := d.handlers[name].(MilestoneHandler); ok {
		return h
	}
	return nil
}

// noticeAckWait bounds recording one milestone's notice.
const noticeAckWait = 30 * time.Second

// startNotices follows every run's milestones and records the notices owed.
func (d *Deliverer) startNotices(ctx context.Context, p *service.Pullers) error {
	ns := d.ns
	cfg := jetstream.ConsumerConfig{
		Durable:       wire.NoticeConsumer,
		Description:   "jetrun milestone notices: records the notices detached runs owe (detached.onMilestones)",
		FilterSubject: ns.MilestoneWildcard(),
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       noticeAckWait,
		MaxDeliver:    -1,
	}
	for _, stream := range d.rt.EventsStreamNames() { // one consumer per events stream
		// A consumer restored from where it had got to keeps its start.
		c, err := pull.CreateOrAdopt(ctx, d.js, stream, cfg)
		if err != nil {
			return fmt.Errorf("finish: create consumer %s on %s: %w", wire.NoticeConsumer, stream, err)
		}
		// Notices owed must not be skipped: a consumer someone deleted or
		// re-pointed is restored from where it had got to.
		keep := d.keeper(stream, cfg, true)
		keep.Observe(c.CachedInfo())
		p.Go(pull.Loop{
			// One at a time, in stream order: the first milestone of a
			// name is recorded first (a run's milestones share a stream).
			Consumer: c, Concurrency: 1,
			Handle: func(ctx context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
				return d.recordNotice(ctx, m)
			},
			Stopped: retryLater,
			Logger:  d.log, Name: wire.NoticeConsumer,
			Repair: keep.Repair, Keep: keep,
		})
	}
	return nil
}

// recordNotice handles one milestone event: when its run asks for a notice
// of its name, the notice is recorded on the row (first of its name only)
// and published; the milestone is then acknowledged.
func (d *Deliverer) recordNotice(ctx context.Context, msg jetstream.Msg) settle.Outcome {
	var m events.Milestone
	if err := json.Unmarshal(msg.Data(), &m); err != nil || events.ValidateID(m.RunID) != nil || m.Name == "" {
		return settle.Term("not a milestone jetrun wrote; nothing to announce")
	}
	if listed, known := d.listed.get(m.RunID); known && !slices.Contains(listed, m.Name) {
		return settle.Ack() // the run asks for no notice of this name
	}
	log := d.log.With("run_id", m.RunID, "milestone", m.Name)
	row, _, err := d.store.Get(ctx, m.RunID)
	switch {
	case errors.Is(err, runstore.ErrRunNotFound):
		return settle.Ack()
	case err != nil:
		d.fault(ctx, log, "read row for a milestone notice", err)
		return settle.Retry(time.Second)
	}
	var listed []string
	if row.Detached != nil && row.Detached.OnFinish != "" {
		listed = row.Detached.OnMilestones
	}
	d.listed.put(m.RunID, listed)
	if !wire.Notifies(row.Detached, m.Name) {
		return settle.Ack()
	}
	if cur, recorded := row.Notices[m.Name]; !recorded || cur.Milestone.Sequence > m.Sequence {
		if row, _, err = d.store.Mutate(ctx, m.RunID, model.Mutation(time.Now(), model.NoticeOwed{Milestone: m})); err != nil {
			if errors.Is(err, runstore.ErrRunNotFound) {
				return settle.Ack()
			}
			d.fault(ctx, log, "record a milestone notice", err)
			return settle.Retry(time.Second)
		}
	}
	if row.NoticeOwed(m.Name) && row.Notices[m.Name].Milestone.Sequence == m.Sequence {
		ack, err := d.rt.PublishNotice(ctx, row, m.Name)
		if err != nil {
			d.fault(ctx, log, "publish a milestone notice", err)
			return settle.Retry(time.Second)
		}
		if ack != nil && !row.NoticeCopyAt(m.Name, ack.Sequence) {
			_, _, _ = d.store.Mutate(ctx, m.RunID, model.Mutation(time.Now(), model.NoticeSeqRecorded{Name: m.Name, Seq: ack.Sequence}))
		}
	}
	return settle.Ack()
}

// deliverNotice delivers one milestone notice, as deliverFinish does a
// finish, and says how to settle its message.
func (d *Deliverer) deliverNotice(ctx context.Context, name string, msg jetstream.Msg) settle.Outcome {
	var n Notice
	if err := json.Unmarshal(msg.Data(), &n); err != nil || events.ValidateID(n.RunID) != nil ||
		events.ValidateToken("milestone name", n.Milestone.Name) != nil {
		reason := "milestone notice is not valid"
		if err != nil {
			reason += ": " + err.Error()
		}
		return d.deadLetter(ctx, name, msg, noticeEntry{n}, claimed{}, reason, 0)
	}
	log := d.log.With("run_id", n.RunID, "milestone", n.Milestone.Name, "handler", name)
	return d.deliverEntry(ctx, log, name, msg, noticeEntry{n})
}

// noticeEntry is the milestone notice n: its slot is
// Notices[n.Milestone.Name].
type noticeEntry struct{ n Notice }

func (noticeEntry) kind() *entryKind { return &noticeKind }
func (e noticeEntry) runID() string  { return e.n.RunID }
func (e noticeEntry) attrs() []any   { return []any{"milestone", e.n.Milestone.Name} }
func (e noticeEntry) about() string  { return " on milestone " + e.n.Milestone.Name }
func (e noticeEntry) ledgered() bool {
	return events.ValidateID(e.n.RunID) == nil && e.n.Milestone.Name != ""
}
func (noticeEntry) reportedAs(name string) string { return name }

func (e noticeEntry) check(r *model.Row, now time.Time) (model.Delivery, time.Duration) {
	return r.CheckNotice(e.n.Milestone.Name, now)
}

func (e noticeEntry) claim(r *model.Row, by string, until, now time.Time) int {
	name := e.n.Milestone.Name
	_ = model.Apply(r, model.NoticeClaimed{Name: name, By: by, Until: until}, now) // checked owed: never refused
	return r.NoticeAttempts(name)
}

func (e noticeEntry) spent(r *model.Row, limit int) bool {
	return r.NoticeSpent(e.n.Milestone.Name, limit)
}

func (e noticeEntry) backoff(r *model.Row, base, ceiling time.Duration) time.Duration {
	return r.NoticeBackoff(e.n.Milestone.Name, base, ceiling)
}

func (e noticeEntry) delivered(r *model.Row, now time.Time) ([]any, error) {
	return nil, model.Apply(r, model.NoticeDelivered{Name: e.n.Milestone.Name}, now)
}

func (e noticeEntry) release(r *model.Row, cause string, failed bool, now time.Time) error {
	return model.Apply(r, model.NoticeReleased{Name: e.n.Milestone.Name, Cause: cause, Failed: failed}, now)
}

func (e noticeEntry) handle(ctx context.Context, d *Deliverer, name string, msg jetstream.Msg, row *model.Row) error {
	h := d.milestoneHandler(name)
	if h == nil {
		return fmt.Errorf("handler %s does not handle milestone notices", name)
	}
	n := e.n
	n.Milestone = row.Notices[n.Milestone.Name].Milestone // the ledger says which milestone of the name
	return d.call(ctx, "milestone", name, msg, func(ctx context.Context) error {
		return h.ServeMilestone(ctx, row.View(), n)
	})
}

// noticesFirst is catchUpNotices for the run of finish res, skipped without
// a round trip when the row the finish carries lists no milestones.
func (d *Deliverer) noticesFirst(ctx context.Context, log *slog.Logger, res Result) (bool, error) {
	if len(res.Run) > 0 {
		var row struct {
			Detached *struct {
				OnMilestones []string `json:"onMilestones"`
			} `json:"detached"`
		}
		if json.Unmarshal(res.Run, &row) == nil && (row.Detached == nil || len(row.Detached.OnMilestones) == 0) {
			return false, nil
		}
	}
	return d.catchUpNotices(ctx, log, res.RunID)
}

// listedCache remembers, per run, the milestone names it lists (a run's
// detached settings never change), so the milestones of runs that list
// none cost no row read after their first. It forgets everything when it
// holds listedCacheSize runs.
type listedCache struct {
	mu sync.Mutex
	m  map[string][]string
}

const listedCacheSize = 10_000

func (c *listedCache) get(runID string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[runID]
	return l, ok
}

func (c *listedCache) put(runID string, listed []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= listedCacheSize {
		c.m = make(map[string][]string)
	}
	c.m[runID] = listed
}

// catchUpTimeout bounds reading a run's milestones before its finish.
const catchUpTimeout = 30 * time.Second

// catchUpNotices makes sure a finish never overtakes the notices it should
// follow: before a finish of a run that asks for milestone notices and has
// not recorded one for every listed name, it reads the run's milestones
// (one history-only replay of its milestone subject) and records and
// publishes any notice still missing — a milestone the notices consumer
// has not reached yet, or one published before any deliverer ran. It
// returns whether notices are owed: the finish then waits for them.
func (d *Deliverer) catchUpNotices(ctx context.Context, log *slog.Logger, runID string) (bool, error) {
	row, _, err := d.store.Get(ctx, runID)
	if err != nil {
		if errors.Is(err, runstore.ErrRunNotFound) {
			return false, nil
		}
		return false, err
	}
	if row.Detached == nil || len(row.Detached.OnMilestones) == 0 {
		return false, nil
	}
	missing := false
	for _, name := range row.Detached.OnMilestones {
		if _, ok := row.Notices[name]; !ok {
			missing = true
		}
	}
	if missing {
		rctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
		defer cancel()
		var found []events.Milestone
		for ev, err := range wire.Replay(rctx, d.js, d.ns, runID, events.ReplayOptions{
			StartSeq:  row.FirstEventSeq,
			StartTime: row.CreatedAt.Add(-time.Minute), // tolerate clock skew with the server
			Kinds:     []string{events.KindMilestone},
			Follow:    events.HistoryOnly,
		}) {
			if err != nil {
				return false, fmt.Errorf("read milestones: %w", err)
			}
			if m := *ev.Milestone; wire.Notifies(row.Detached, m.Name) {
				found = append(found, m)
			}
		}
		var added []string
		if len(found) > 0 {
			now := time.Now()
			row, _, err = d.store.Mutate(ctx, runID, func(r *model.Row) error {
				added = added[:0]
				for _, m := range found {
					if model.Apply(r, model.NoticeOwed{Milestone: m}, now) == nil && !slices.Contains(added, m.Name) {
						added = append(added, m.Name)
					}
				}
				if len(added) == 0 {
					return runstore.ErrNoChange
				}
				return nil
			})
			if err != nil {
				return false, err
			}
		}
		for _, name := range added {
			if _, err := d.rt.PublishNotice(ctx, row, name); err != nil {
				return false, err
			}
			log.InfoContext(ctx, "milestone notice found before the finish", "milestone", name)
		}
	}
	return len(row.PendingNotices()) > 0, nil
}
