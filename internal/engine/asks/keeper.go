package asks

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// KeeperConfig configures a Keeper. Zero values mean defaults.
type KeeperConfig struct {
	// Every is how often the keeper sweeps the asks (DefaultKeepEvery).
	Every time.Duration
	// Settle is how long an answer may stay undelivered before the keeper
	// delivers it (DefaultSettle): the answerer delivers it at once, the
	// keeper takes over when the answerer died in between.
	Settle time.Duration
	// RunState says whether run id is known and whether it ended (its
	// row final); nil: asks are never closed for their run.
	RunState func(id string) (known, ended bool)
	// Notify, if set, is the new-ask hook: it is called with each open
	// ask not notified yet until it returns nil (then the ask records
	// NotifiedAt), failures tried again after a growing pause: at least
	// once per ask, once on the happy path.
	Notify func(ctx context.Context, a *events.Ask) error
	// NotifyName names the hook: "" (the webhook) records NotifiedAt,
	// another name records Notified[name], so hooks of several names each
	// get every ask.
	NotifyName string
	// NotifyOnly makes the keeper run the hook and nothing else (no
	// deliveries, deadlines or closes: a process of its own that only
	// hears new asks).
	NotifyOnly bool
	// NotifyRetry is the first pause after a failed hook
	// (DefaultNotifyRetry); it doubles per failure, up to 5 minutes.
	NotifyRetry time.Duration
	Logger      *slog.Logger
}

// Defaults of KeeperConfig.
const (
	DefaultKeepEvery = time.Second
	DefaultSettle    = 2 * time.Second
	// unknownRunAfter is how old an ask of a run the caller does not know
	// must be before it is closed (a new run may not be known yet).
	unknownRunAfter = time.Minute
)

// Keeper finishes what the asks owe, from the index: it delivers answers
// left undelivered (their answerer died between the answer and the
// delivery; at start, those of before), answers an ask whose deadline
// passed with its default, closes the asks of runs that ended, and
// removes the closed asks of runs that were cleared. Every
// step is a compare-and-set or an idempotent delivery, so any number of
// keepers may run.
type Keeper struct {
	store *Store
	view  *View
	cfg   KeeperConfig
	log   *slog.Logger

	once sync.Once
	stop context.CancelFunc
	done chan struct{}

	// retries holds, per ask whose hook failed, when to try again and the
	// pause after that (the sweep's goroutine only).
	retries map[string]retry
	// notified holds the asks this keeper's hook took that the view does
	// not show notified yet, so a sweep before the view catches up does
	// not hand them out again.
	notified map[string]bool
}

// retry is when a failed hook is tried again, and the pause after.
type retry struct {
	at    time.Time
	pause time.Duration
}

// DefaultNotifyRetry is KeeperConfig.NotifyRetry's default.
const DefaultNotifyRetry = 5 * time.Second

// The longest pause between the hook's tries of one ask, and the bound
// of one try.
const (
	maxNotifyPause = 5 * time.Minute
	notifyTimeout  = 30 * time.Second
)

// NewKeeper returns a keeper of store's asks, reading them from view.
func NewKeeper(store *Store, view *View, cfg KeeperConfig) *Keeper {
	cfg.Every, cfg.Settle = cmp.Or(cfg.Every, DefaultKeepEvery), cmp.Or(cfg.Settle, DefaultSettle)
	cfg.NotifyRetry = cmp.Or(cfg.NotifyRetry, DefaultNotifyRetry)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keeper{store: store, view: view, cfg: cfg, log: log, done: make(chan struct{}), retries: make(map[string]retry),
		notified: make(map[string]bool)}
}

// Start sweeps at once (answers owed from before), then every
// KeeperConfig.Every until Shutdown.
func (k *Keeper) Start(ctx context.Context) error {
	ctx, k.stop = context.WithCancel(ctx)
	go func() {
		defer close(k.done)
		t := time.NewTicker(k.cfg.Every)
		defer t.Stop()
		first := true
		for {
			k.Sweep(ctx, first)
			first = false
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Shutdown stops the sweeps and waits for the one in flight (or ctx).
func (k *Keeper) Shutdown(ctx context.Context) error {
	if k.stop == nil {
		return nil
	}
	k.once.Do(k.stop)
	select {
	case <-k.done:
	case <-ctx.Done():
	}
	return nil
}

// Sweep does what the asks owe now; at start (all) it delivers every
// undelivered answer, however recent.
func (k *Keeper) Sweep(ctx context.Context, all bool) {
	now := time.Now()
	for _, a := range k.view.All() {
		if ctx.Err() != nil {
			return
		}
		var err error
		switch {
		case k.cfg.NotifyOnly:
		case Owed(a) && (all || now.Sub(a.Answer.At) >= k.cfg.Settle):
			_, err = k.store.Deliver(ctx, a)
			if err == nil {
				k.log.InfoContext(ctx, "ask answer delivered after its answerer", "ask_id", a.ID, "run_id", a.RunID)
			}
		case a.ClosedAt != nil && k.gone(a, now):
			err = k.store.remove(ctx, a.ID)
		case a.Status != events.AskOpen || a.ClosedAt != nil:
		case k.ended(a, now):
			_, err = k.store.Close(ctx, a.ID, "run ended")
		case a.Deadline != nil && !now.Before(*a.Deadline):
			err = k.deadline(ctx, a)
		}
		if err != nil && ctx.Err() == nil {
			k.log.WarnContext(ctx, "keep an ask", "ask_id", a.ID, "run_id", a.RunID, "err", err)
		}
		switch {
		case k.cfg.Notify == nil:
		case a.Status != events.AskOpen || k.notifiedAt(a) != nil:
			delete(k.notified, a.ID)
			delete(k.retries, a.ID)
		case !k.notified[a.ID]:
			k.notify(ctx, a, now)
		}
	}
}

// notify hands a to the new-ask hook unless a failed try asks to wait.
func (k *Keeper) notify(ctx context.Context, a *events.Ask, now time.Time) {
	r, failed := k.retries[a.ID]
	if failed && now.Before(r.at) {
		return
	}
	nctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	err := k.cfg.Notify(nctx, a)
	cancel()
	if err != nil {
		r.pause = min(max(2*r.pause, k.cfg.NotifyRetry), maxNotifyPause)
		r.at = now.Add(r.pause)
		k.retries[a.ID] = r
		k.log.WarnContext(ctx, "new-ask hook failed; trying again", "ask_id", a.ID, "run_id", a.RunID, "after", r.pause, "err", err)
		return
	}
	delete(k.retries, a.ID)
	k.notified[a.ID] = true
	if _, err := k.store.mutate(ctx, a.ID, func(cur *events.Ask) error {
		if k.notifiedAt(cur) != nil {
			return errNoChange
		}
		at := time.Now().UTC()
		if k.cfg.NotifyName == "" {
			cur.NotifiedAt = &at
			return nil
		}
		if cur.Notified == nil {
			cur.Notified = make(map[string]time.Time)
		}
		cur.Notified[k.cfg.NotifyName] = at
		return nil
	}); err != nil {
		k.log.WarnContext(ctx, "record an ask notified", "ask_id", a.ID, "err", err)
	}
}

// notifiedAt is when this keeper's hook took a (nil: not yet).
func (k *Keeper) notifiedAt(a *events.Ask) *time.Time {
	if k.cfg.NotifyName == "" {
		return a.NotifiedAt
	}
	if at, ok := a.Notified[k.cfg.NotifyName]; ok {
		return &at
	}
	return nil
}

// ended reports whether a's run ended, or is unknown long after the ask.
func (k *Keeper) ended(a *events.Ask, now time.Time) bool {
	if k.cfg.RunState == nil {
		return false
	}
	known, ended := k.cfg.RunState(a.RunID)
	return ended || !known && now.Sub(a.AskedAt) > unknownRunAfter
}

// gone reports whether a's run is unknown (cleared) long after the ask:
// its closed asks go with it.
func (k *Keeper) gone(a *events.Ask, now time.Time) bool {
	if k.cfg.RunState == nil {
		return false
	}
	known, _ := k.cfg.RunState(a.RunID)
	return !known && now.Sub(a.AskedAt) > unknownRunAfter
}

// deadline answers a with its default outcome, by "deadline", and
// delivers it; an ask answered meanwhile keeps its answer.
func (k *Keeper) deadline(ctx context.Context, a *events.Ask) error {
	answered, err := k.store.Answer(ctx, a.ID, a.Digest, a.Default, "deadline")
	if err != nil {
		var c *Conflict
		if asConflict(err, &c) {
			return nil // answered, changed or closed meanwhile: the next sweep sees it
		}
		return err
	}
	k.log.InfoContext(ctx, "ask deadline passed: its default answered", "ask_id", a.ID, "run_id", a.RunID)
	_, err = k.store.Deliver(ctx, answered)
	return err
}
