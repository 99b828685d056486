package pull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeepEvery is how often a Loop with a Keeper checks its consumer.
const KeepEvery = 2 * time.Second

// missingGrace is how long a Keeper waits before it re-creates a consumer
// that vanished.
const missingGrace = time.Second

// Restorer is told of every durable consumer a Keeper restored, for
// metrics. reason is "missing" or "drifted".
type Restorer interface {
	ConsumerRestored(consumer, reason string)
}

// Keeper keeps one durable consumer as jetrun configured it. Any role
// allowed to create a consumer may also update one (the server cannot tell
// the two apart), and an operator may delete one: a consumer that vanished
// or whose settings drifted (a filter re-pointed at a subject nothing
// uses, a pause, a changed ack policy…) is restored loudly (an ERROR log
// line and Restorer) instead of silently starving its loop.
//
// With Resume, the restored consumer starts right after the last stream
// sequence its predecessor had acknowledged (its ack floor, read at every
// check), not at Config's deliver policy: it does not skip what its
// predecessor had not delivered (at least once: what was acknowledged
// after the last check comes again). Without it (work-queue streams, whose
// acknowledged messages are gone), Config's deliver policy applies.
//
// Keeper is safe for concurrent use; a Loop calls it between fetches.
type Keeper struct {
	JS     jetstream.JetStream
	Stream string
	Config jetstream.ConsumerConfig
	Resume bool
	// ByUpdate restores a drifted consumer by updating it back instead of
	// deleting it and creating it afresh: its fetch loops keep fetching.
	ByUpdate bool
	// Rewind, with ByUpdate, resets a consumer updated back to its ack
	// floor: while re-pointed (or paused past messages, or with a lower
	// max deliver) it moved past messages it never delivered, and a
	// work-queue stream still holds them: they are delivered again, with
	// those delivered and not yet acknowledged (their handlers must take a
	// second delivery, as after an ack wait).
	Rewind bool
	// Ensure, if set, re-creates the streams first (engine.Runtime.Repair)
	// when the consumer is missing.
	Ensure   func(ctx context.Context) error
	Restorer Restorer
	Logger   *slog.Logger

	batch atomic.Int64  // the largest batch its loop fetches
	floor atomic.Uint64 // the last ack floor (stream sequence) seen
	known atomic.Bool   // floor was read from the consumer at least once
}

// Observe records the ack floor of info (from the consumer as created).
func (k *Keeper) Observe(info *jetstream.ConsumerInfo) {
	if info == nil {
		return
	}
	defer k.known.Store(true)
	floor := info.AckFloor.Stream
	if info.NumAckPending == 0 && info.NumRedelivered == 0 {
		floor = max(floor, info.Delivered.Stream)
	}
	for {
		cur := k.floor.Load()
		if floor <= cur || k.floor.CompareAndSwap(cur, floor) {
			return
		}
	}
}

// Check reads the consumer and restores it when it is missing or drifted.
func (k *Keeper) Check(ctx context.Context) error {
	info, err := k.info(ctx)
	if err != nil {
		return err
	}
	if info != nil {
		if d := k.drift(info.Config); d == "" {
			k.Observe(info)
			return nil
		}
	}
	return k.restore(ctx, info)
}

// Repair is a Loop.Repair: fetches fail, as they do when the consumer (or
// its stream) was deleted.
func (k *Keeper) Repair(ctx context.Context) error {
	if k.Ensure != nil {
		if err := k.Ensure(ctx); err != nil {
			return err
		}
	}
	return k.Check(ctx)
}

func (k *Keeper) info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	c, err := k.JS.Consumer(ctx, k.Stream, k.Config.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check consumer %s: %w", k.Config.Durable, err)
	}
	return c.CachedInfo(), nil
}

// drift is Drift, plus a max request batch below what the loop fetches
// at once (its fetches would all fail).
func (k *Keeper) drift(got jetstream.ConsumerConfig) string {
	if d := Drift(k.Config, got); d != "" {
		return d
	}
	if b := k.batch.Load(); got.MaxRequestBatch > 0 && int64(got.MaxRequestBatch) < b {
		return fmt.Sprintf("max request batch %d, below the %d fetched at once", got.MaxRequestBatch, b)
	}
	return ""
}

// restore deletes the drifted consumer (if it still is) and creates it
// again with its configured settings.
func (k *Keeper) restore(ctx context.Context, cur *jetstream.ConsumerInfo) error {
	reason, drift := "missing", ""
	if cur != nil && k.ByUpdate {
		reason, drift = "drifted", k.drift(cur.Config)
		if _, err := k.JS.UpdateConsumer(ctx, k.Stream, k.Config); err != nil {
			return fmt.Errorf("restore consumer %s: update it back: %w", k.Config.Durable, err)
		}
		var from uint64
		if k.Rewind {
			r, err := k.JS.ResetConsumer(ctx, k.Stream, k.Config.Durable)
			if err != nil {
				return fmt.Errorf("restore consumer %s: rewind it to its ack floor: %w", k.Config.Durable, err)
			}
			from = r.ResetSeq
		}
		k.restored(ctx, reason, drift, from)
		return nil
	}
	if cur != nil {
		reason, drift = "drifted", k.drift(cur.Config)
		if err := k.JS.DeleteConsumer(ctx, k.Stream, k.Config.Durable); err != nil &&
			!errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("restore consumer %s: delete the drifted one: %w", k.Config.Durable, err)
		}
	} else {
		// A consumer being deleted is gone from the stream before its
		// files are: one created again at once under its name can have
		// its directory removed under it by the server. Let the delete
		// finish, then look again (another process may have restored it).
		t := time.NewTimer(missingGrace)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if k.Ensure != nil {
			if err := k.Ensure(ctx); err != nil {
				return err
			}
		}
		if info, err := k.info(ctx); err != nil || info != nil {
			return err // there again: the next check compares it
		}
	}
	cfg := k.Config
	from := k.floor.Load() + 1
	if k.Resume && k.known.Load() {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, from, nil
		// A stream deleted and created again (engine.Runtime.Repair)
		// numbers its messages from 1: everything in it is new.
		s, err := k.JS.Stream(ctx, k.Stream)
		if err != nil {
			return fmt.Errorf("restore consumer %s: %w", k.Config.Durable, err)
		}
		if s.CachedInfo().State.LastSeq < from-1 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverAllPolicy, 0
			k.floor.Store(0)
		}
	}
	_, err := k.JS.CreateConsumer(ctx, k.Stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return nil // another process restored it first
	}
	if err != nil {
		return fmt.Errorf("restore consumer %s: %w", k.Config.Durable, err)
	}
	if cfg.DeliverPolicy != jetstream.DeliverByStartSequencePolicy {
		from = 0
	}
	k.restored(ctx, reason, drift, from)
	return nil
}

// restored says loudly that the consumer was restored.
func (k *Keeper) restored(ctx context.Context, reason, drift string, from uint64) {
	if k.Logger != nil {
		args := []any{"consumer", k.Config.Durable, "stream", k.Stream, "reason", reason}
		if drift != "" {
			args = append(args, "drift", drift)
		}
		if from > 0 {
			args = append(args, "from_seq", from)
		}
		k.Logger.ErrorContext(ctx, "durable consumer restored: someone deleted or changed it", args...)
	}
	if k.Restorer != nil {
		k.Restorer.ConsumerRestored(k.Config.Durable, reason)
	}
}

// minAckWait is the shortest ack wait Drift accepts on a consumer whose
// configured one differs. Ack wait and max ack pending are tunables the
// processes sharing a consumer may set differently (each creates it with
// its own, the last one wins), so Drift does not compare them, except an
// ack wait so short it would redeliver every message at once.
const minAckWait = time.Second

// The pull request limits Drift accepts: a server may fill them in from its
// own limits, so only values too small for jetrun's fetches (which wait up
// to 5 s for batches of up to a loop's concurrency) count as drift.
const (
	minRequestExpires = 10 * time.Second
	minRequestBatch   = 8
)

// Drift says how got (a consumer's settings on the server) differs from
// want (as jetrun creates it) in what decides which messages the consumer
// delivers, and how: "" when it does not.
func Drift(want, got jetstream.ConsumerConfig) string {
	switch {
	case got.FilterSubject != want.FilterSubject || !slices.Equal(got.FilterSubjects, want.FilterSubjects):
		return fmt.Sprintf("filter %q %v, want %q %v", got.FilterSubject, got.FilterSubjects, want.FilterSubject, want.FilterSubjects)
	case got.AckPolicy != want.AckPolicy:
		return fmt.Sprintf("ack policy %v, want %v", got.AckPolicy, want.AckPolicy)
	case got.AckWait < minAckWait && got.AckWait != want.AckWait:
		return fmt.Sprintf("ack wait %s", got.AckWait)
	case want.MaxDeliver != 0 && got.MaxDeliver != want.MaxDeliver:
		return fmt.Sprintf("max deliver %d, want %d", got.MaxDeliver, want.MaxDeliver)
	case got.PauseUntil != nil && got.PauseUntil.After(time.Now()):
		return "paused until " + got.PauseUntil.String()
	case got.HeadersOnly != want.HeadersOnly:
		return "headers only"
	case got.MaxRequestExpires > 0 && got.MaxRequestExpires < minRequestExpires:
		return fmt.Sprintf("max request expires %s", got.MaxRequestExpires)
	case got.MaxRequestBatch > 0 && got.MaxRequestBatch < minRequestBatch:
		return fmt.Sprintf("max request batch %d", got.MaxRequestBatch)
	case got.DeliverSubject != want.DeliverSubject:
		return "deliver subject " + got.DeliverSubject
	case len(got.BackOff) != len(want.BackOff):
		return "backoff"
	}
	return ""
}
