package runstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
)

// A Lease is a named key in the active bucket that one holder at a time
// keeps by renewing it within its time to live, which the server enforces:
// the reconciler's leader election is one. No clock comparison between
// hosts is involved: a holder that stops renewing loses the key one TTL
// after its last renewal, and the next Hold of anyone wins it.
type Lease struct {
	s   *Store
	key string
}

// LeaseState is what a Lease's key says.
type LeaseState struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
	// Revision changes with every renewal.
	Revision uint64 `json:"-"`
}

// Lease returns the lease named name (a key of the active bucket).
func (s *Store) Lease(name string) *Lease { return &Lease{s: s, key: name} }

// State returns who holds l, or a zero LeaseState if nobody does.
func (l *Lease) State(ctx context.Context) (LeaseState, error) {
	e, err := l.s.active.Get(ctx, l.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return LeaseState{}, nil
	}
	if err != nil {
		return LeaseState{}, fmt.Errorf("kv: read lease %s: %w", l.key, err)
	}
	var st LeaseState
	if json.Unmarshal(e.Value(), &st) != nil {
		return LeaseState{Revision: e.Revision()}, nil // unreadable: nobody this code knows
	}
	st.Revision = e.Revision()
	return st, nil
}

// Hold takes l for holder if it is free, or renews it if holder has it,
// for ttl (at least the server's minimum of a second). It reports whether
// holder holds l now; false with a nil error means someone else does until
// their TTL runs out. A renewal is a publish that both resets the TTL and
// expects the key's current revision, so it never overwrites another
// holder.
func (l *Lease) Hold(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	ttl = max(ttl, time.Second)
	cur, err := l.State(ctx)
	if err != nil {
		return false, err
	}
	switch {
	case cur.Revision == 0:
		data, _ := json.Marshal(LeaseState{Holder: holder, Since: time.Now()})
		_, err = l.s.active.Create(ctx, l.key, data, jetstream.KeyTTL(ttl))
	case cur.Holder != holder:
		return false, nil
	default:
		data, _ := json.Marshal(LeaseState{Holder: holder, Since: cur.Since})
		_, err = l.s.js.Publish(ctx, l.s.activeSubject(l.key), data,
			jetstream.WithExpectLastSequencePerSubject(cur.Revision), jetstream.WithMsgTTL(ttl))
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists) || wire.IsWrongLastSequence(err):
		return false, nil // another holder won the race
	}
	return false, fmt.Errorf("kv: hold lease %s: %w", l.key, err)
}

// Release gives l up if holder has it.
func (l *Lease) Release(ctx context.Context, holder string) error {
	cur, err := l.State(ctx)
	if err != nil || cur.Revision == 0 || cur.Holder != holder {
		return err
	}
	if err := l.s.active.Delete(ctx, l.key, jetstream.LastRevision(cur.Revision)); err != nil &&
		!errors.Is(err, jetstream.ErrKeyExists) && !wire.IsWrongLastSequence(err) {
		return fmt.Errorf("kv: release lease %s: %w", l.key, err)
	}
	return nil
}
