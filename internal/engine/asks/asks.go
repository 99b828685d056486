// Package asks is the home of asks (events.Ask): what runs wait on people
// for, one entry per ask in the asks bucket (jetrun_asks), key = the ask's
// id.
//
// Invariants. A worker creates an ask when a run starts waiting (Ensure:
// a create, so a takeover that waits again finds the same ask and makes no
// second one) and settles it when the wait ends (Received, or Close). An
// answer (Answer) is a compare-and-set from open to answered: the first
// answer wins, a second gets ErrAnswered naming who answered and when, and
// an answer for a payload that changed since gets ErrStale. The answer
// reaches the run through the wait's own path (Deliver: the signal, with a
// message id derived from the ask's, stored only when no signal is stored
// for the wait yet; or the call's reply, whose first stored copy counts),
// so delivering twice, by whoever finds an answered ask undelivered, gives
// the run the answer once.
package asks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Errors of the Store; test with errors.Is (ErrAnswered and ErrStale come
// as *Conflict, with errors.As).
var (
	// ErrNotFound is returned for an ask that does not exist.
	ErrNotFound = errors.New("no such ask")
	// ErrAnswered is returned by Answer for an ask answered already.
	ErrAnswered = errors.New("ask answered already")
	// ErrStale is returned by Answer when the digest given is not the
	// ask's: its payload changed since the person saw it.
	ErrStale = errors.New("the ask's payload changed since")
	// ErrClosed is returned by Answer for an ask whose wait ended.
	ErrClosed = errors.New("ask closed")
	// ErrBadValue is returned (as *ValueError) by Answer for a value that
	// does not fit the ask's kind or schema.
	ErrBadValue = errors.New("answer does not fit the ask")
)

// Conflict is the error of an answer that came too late or for another
// payload: the ask as it is (who answered and when, its current digest).
type Conflict struct {
	Err error // ErrAnswered, ErrStale or ErrClosed
	Ask *events.Ask
}

// Error says what the conflict is, naming who answered and when.
func (c *Conflict) Error() string {
	switch {
	case errors.Is(c.Err, ErrAnswered) && c.Ask.Answer != nil:
		return fmt.Sprintf("ask %s was answered by %s at %s", c.Ask.ID, c.Ask.Answer.By, c.Ask.Answer.At.UTC().Format(time.RFC3339Nano))
	case errors.Is(c.Err, ErrStale):
		return fmt.Sprintf("ask %s: the payload changed since; its digest is now %s", c.Ask.ID, c.Ask.Digest)
	default:
		return fmt.Sprintf("ask %s: %v (%s)", c.Ask.ID, c.Err, c.Ask.ClosedReason)
	}
}

// Unwrap returns ErrAnswered, ErrStale or ErrClosed.
func (c *Conflict) Unwrap() error { return c.Err }

// Store reads and writes the asks bucket. It is safe for concurrent use.
type Store struct {
	js      jetstream.JetStream
	ns      wire.Namespace
	kv      jetstream.KeyValue
	signals jetstream.Stream
}

// openRetry bounds how long Open retries a transient failure.
const openRetry = 30 * time.Second

// Open binds the asks bucket, creating it when it does not exist (with
// replicas), and the signals stream.
func Open(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, replicas int) (*Store, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:      ns.AsksBucket(),
		Description: "jetrun asks: what runs wait on people for, key = ask id",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
	var kv jetstream.KeyValue
	err := jsfault.Retry(ctx, openRetry, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				kv, err = js.KeyValue(ctx, cfg.Bucket) // another process won the race
			}
			if err == nil {
				_, err = bucket.Harden(ctx, js, cfg.Bucket) // refuse roll-ups
			}
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("asks: open bucket %s: %w", cfg.Bucket, err)
	}
	signals, err := js.Stream(ctx, ns.SignalsStream())
	if err != nil {
		return nil, fmt.Errorf("asks: bind stream %s: %w", ns.SignalsStream(), err)
	}
	return &Store{js: js, ns: ns, kv: kv, signals: signals}, nil
}

// Bucket returns the bucket's KeyValue (for watches).
func (s *Store) Bucket() jetstream.KeyValue { return s.kv }

// SignalID is the id of the ask of a run's wait for signal name after the
// signal numbered seen.
func SignalID(runID, name string, seen uint64) string {
	return fmt.Sprintf("%s.s.%s.%d", runID, name, seen)
}

// CallID is the id of the ask of a run's call seq.
func CallID(runID string, seq int64) string { return fmt.Sprintf("%s.c.%d", runID, seq) }

// Get returns ask id and its revision, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*events.Ask, uint64, error) {
	if err := ValidateID(id); err != nil {
		return nil, 0, fmt.Errorf("asks: %w: %w", ErrNotFound, err)
	}
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("asks: ask %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("asks: get ask %s: %w", id, err)
	}
	a, err := Decode(e.Value())
	if err != nil {
		return nil, 0, fmt.Errorf("asks: ask %s: %w", id, err)
	}
	return a, e.Revision(), nil
}

// Decode decodes a stored ask.
func Decode(data []byte) (*events.Ask, error) {
	var a events.Ask
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("corrupt ask: %w", err)
	}
	return &a, nil
}

// ValidateID checks that id can be an ask's id: a run id and a suffix of
// tokens, nothing a subject or a URL would misread.
func ValidateID(id string) error {
	if id == "" || len(id) > 256 {
		return fmt.Errorf("ask id must be 1 to 256 bytes, got %d", len(id))
	}
	for _, c := range id {
		ok := c == '.' || c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			return fmt.Errorf("ask id %q has a character outside [A-Za-z0-9._-]", id)
		}
	}
	return nil
}

// maxConflicts bounds the retries of a lost compare-and-set.
const maxConflicts = 100

// mutate applies fn to ask id and stores the result with a
// compare-and-set, retrying lost ones. fn returning errNoChange leaves
// the ask as it is.
func (s *Store) mutate(ctx context.Context, id string, fn func(a *events.Ask) error) (*events.Ask, error) {
	for range maxConflicts {
		a, rev, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := fn(a); errors.Is(err, errNoChange) {
			return a, nil
		} else if err != nil {
			return a, err
		}
		data, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("asks: encode ask %s: %w", id, err)
		}
		_, err = s.kv.Update(ctx, id, data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue // someone else wrote it: read it again
		}
		if err != nil {
			return nil, fmt.Errorf("asks: store ask %s: %w", id, err)
		}
		return a, nil
	}
	return nil, fmt.Errorf("asks: store ask %s: too many concurrent writers", id)
}

// errNoChange, from a mutate function, leaves the ask as it is.
var errNoChange = errors.New("no change")

// Ensure stores ask a (open, its digest computed) unless it exists: a
// takeover that waits again gets the stored ask back, with its payload,
// digest and deadline updated when they changed and the ask is still
// open (an answer then has to name the new digest).
func (s *Store) Ensure(ctx context.Context, a events.Ask) (*events.Ask, error) {
	digest, err := Digest(a.Payload)
	if err != nil {
		return nil, fmt.Errorf("asks: ask %s: %w", a.ID, err)
	}
	a.Digest, a.Status = digest, events.AskOpen
	data, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("asks: encode ask %s: %w", a.ID, err)
	}
	_, err = s.kv.Create(ctx, a.ID, data)
	if err == nil {
		return &a, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, fmt.Errorf("asks: create ask %s: %w", a.ID, err)
	}
	return s.mutate(ctx, a.ID, func(cur *events.Ask) error {
		if cur.Status != events.AskOpen || cur.Digest == a.Digest {
			return errNoChange
		}
		cur.Payload, cur.Digest, cur.Title, cur.Choices, cur.Schema = a.Payload, a.Digest, a.Title, a.Choices, a.Schema
		cur.Kind, cur.Default, cur.Deadline = a.Kind, a.Default, a.Deadline
		return nil
	})
}

// Answer answers ask id with value, given by by for the payload whose
// digest is digest: a compare-and-set from open to answered. It returns
// the answered ask, or ErrNotFound, a *Conflict (ErrAnswered, ErrStale,
// ErrClosed) or a *ValueError (ErrBadValue). A second call with the same
// answer gets ErrAnswered too.
func (s *Store) Answer(ctx context.Context, id, digest string, value json.RawMessage, by string) (*events.Ask, error) {
	return s.mutate(ctx, id, func(a *events.Ask) error {
		switch {
		case a.Status == events.AskAnswered:
			return &Conflict{Err: ErrAnswered, Ask: a}
		case a.Status != events.AskOpen:
			return &Conflict{Err: ErrClosed, Ask: a}
		case digest != a.Digest:
			return &Conflict{Err: ErrStale, Ask: a}
		}
		canon, err := CheckValue(a, value)
		if err != nil {
			return err
		}
		a.Status = events.AskAnswered
		a.Answer = &events.AskAnswer{Value: canon, By: by, At: time.Now().UTC(), Digest: digest}
		return nil
	})
}

// Received settles ask id when its wait got value (from the ask's answer,
// a signal sent to the run directly, a call's reply by other means): an
// open ask is answered by by, an answered one marked delivered; either is
// closed, reason "received".
func (s *Store) Received(ctx context.Context, id string, value json.RawMessage, by string) (*events.Ask, error) {
	return s.mutate(ctx, id, func(a *events.Ask) error {
		if a.ClosedAt != nil {
			return errNoChange
		}
		now := time.Now().UTC()
		switch a.Status {
		case events.AskOpen:
			a.Status = events.AskAnswered
			a.Answer = &events.AskAnswer{Value: value, By: by, At: now, Digest: a.Digest, DeliveredAt: &now}
		case events.AskAnswered:
			if a.Answer.DeliveredAt == nil {
				a.Answer.DeliveredAt = &now
			}
		}
		a.ClosedAt, a.ClosedReason = &now, "received"
		return nil
	})
}

// Close settles ask id when its wait ended without a value (reason: the
// run was cancelled or ended, the wait timed out): an open ask is closed;
// an answered one keeps its answer and is marked closed (no one delivers
// it any more).
func (s *Store) Close(ctx context.Context, id, reason string) (*events.Ask, error) {
	return s.mutate(ctx, id, func(a *events.Ask) error {
		if a.ClosedAt != nil {
			return errNoChange
		}
		now := time.Now().UTC()
		if a.Status == events.AskOpen {
			a.Status = events.AskClosed
		}
		a.ClosedAt, a.ClosedReason = &now, reason
		return nil
	})
}

// markDelivered records that ask id's answer is on its way to the run.
func (s *Store) markDelivered(ctx context.Context, id string) (*events.Ask, error) {
	return s.mutate(ctx, id, func(a *events.Ask) error {
		if a.Answer == nil || a.Answer.DeliveredAt != nil {
			return errNoChange
		}
		now := time.Now().UTC()
		a.Answer.DeliveredAt = &now
		return nil
	})
}

// Owed reports whether a's answer still has to reach its run.
func Owed(a *events.Ask) bool {
	return a.Status == events.AskAnswered && a.Answer != nil && a.Answer.DeliveredAt == nil && a.ClosedAt == nil
}

// asConflict is errors.As for a *Conflict.
func asConflict(err error, c **Conflict) bool { return errors.As(err, c) }

// remove deletes ask id (its run was cleared).
func (s *Store) remove(ctx context.Context, id string) error {
	if err := s.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("asks: remove ask %s: %w", id, err)
	}
	return nil
}
