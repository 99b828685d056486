// Package jsfault classifies the errors of NATS and JetStream calls once for
// all of jetrun: a transient fault (no answer, a timeout, a leader election,
// a disconnect) is retried with backoff; something missing (a deleted
// stream, consumer or bucket) is re-created, then retried; anything else is
// permanent and reported (a fenced write, an oversize message, a bad
// request, the caller's own cancellation).
//
// The classification never retries anything itself; Retry and NewBackOff
// are the one way jetrun's callers wait between tries: bounded exponential
// backoff (cenkalti/backoff/v4), always bounded by the caller's context.
// docs/operations.md has the table.
package jsfault

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Class is how a caller treats a failed call.
type Class int

// The classes, from "nothing to do" to "report it".
const (
	// None is the class of a nil error.
	None Class = iota
	// Transient faults pass by themselves: retry with backoff.
	Transient
	// Missing means a stream, consumer or bucket does not exist: re-create
	// it with the configured settings, then retry.
	Missing
	// Permanent errors do not change with a retry: report them.
	Permanent
)

// String names the class, for logs and metrics.
func (c Class) String() string {
	switch c {
	case None:
		return "none"
	case Transient:
		return "transient"
	case Missing:
		return "missing"
	}
	return "permanent"
}

// The JetStream API error codes (nats-server's errors.json) of faults that
// pass by themselves: a cluster or a stream that is electing a leader or
// catching up, JetStream starting or stopping.
const (
	codeClusterIncomplete      jetstream.ErrorCode = 10004 // JSClusterIncompleteErr
	codeClusterNotAvailable    jetstream.ErrorCode = 10008 // JSClusterNotAvailErr
	codeClusterNotLeader       jetstream.ErrorCode = 10009 // JSClusterNotLeaderErr
	codeLastSeqPerSubjNotReady jetstream.ErrorCode = 10163 // JSStreamExpectedLastSeqPerSubjectNotReady
	// A stream at its consumer limit (default_max_consumers) has room again
	// once a viewer's replay ends.
	codeMaxConsumers jetstream.ErrorCode = 10026 // JSMaximumConsumersLimitErr
	// A re-sent message whose first copy is still being replicated: a
	// retry is answered as a duplicate once it is stored.
	codeDuplicateInProcess jetstream.ErrorCode = 10158 // JSStreamDuplicateMessageConflict
)

// ErrWriteInFlight is a compare-and-set refused because an earlier write of
// the same key is still being replicated: a clustered stream's leader
// refuses a second write expecting the same last sequence of a subject while
// the first is in process ("wrong last sequence"), and that first write —
// often the same caller's timed-out try — may yet be lost with its leader.
// Retry: the next try either lands or finds what the first one stored.
var ErrWriteInFlight = errors.New("jetstream: an earlier write of the key is still in process")

// transientErrs are the client-side errors of faults that pass by
// themselves.
var transientErrs = []error{
	ErrWriteInFlight,                       // see ErrWriteInFlight
	nats.ErrNoResponders,                   // nobody answered: no stream leader, JetStream away
	jetstream.ErrNoStreamResponse,          // the same, for a publish
	nats.ErrTimeout,                        // a request timed out
	jetstream.ErrAsyncPublishTimeout,       // an asynchronous publish was not acknowledged in time
	jetstream.ErrTooManyStalledMsgs,        // too many asynchronous publishes unacknowledged
	nats.ErrDisconnected,                   // the connection is down and reconnecting
	nats.ErrConnectionReconnecting,         // the same
	nats.ErrReconnectBufExceeded,           // the reconnect buffer is full
	nats.ErrStaleConnection,                // the server stopped answering pings
	jetstream.ErrConsumerLeadershipChanged, // a pull request ended by a leader election
	jetstream.ErrServerShutdown,            // a pull request ended by a server going away
	jetstream.ErrNoHeartbeat,               // a pull request lost its heartbeats
	jetstream.ErrOrderedConsumerReset,      // an ordered consumer is being re-created
	jetstream.ErrJetStreamNotEnabled,       // JetStream starting or stopping on the server
}

// missingErrs are the errors of a stream, consumer or bucket that does not
// exist.
var missingErrs = []error{
	jetstream.ErrStreamNotFound,
	jetstream.ErrConsumerNotFound,
	jetstream.ErrConsumerDoesNotExist,
	jetstream.ErrConsumerDeleted,
	jetstream.ErrBucketNotFound,
	nats.ErrStreamNotFound,
	nats.ErrConsumerNotFound,
	nats.ErrBucketNotFound,
}

// Classify says how to treat err, returned by a call made with ctx. Once
// ctx is done every error is Permanent: a deadline the caller set is not a
// fault of the server's, and waiting longer is not what the caller wants.
// A context.DeadlineExceeded while ctx is alive is a request timeout (a
// JetStream API call's own timeout) and Transient.
func Classify(ctx context.Context, err error) Class {
	if err == nil {
		return None
	}
	if ctx != nil && ctx.Err() != nil {
		return Permanent
	}
	for _, m := range missingErrs {
		if errors.Is(err, m) {
			return Missing
		}
	}
	for _, t := range transientErrs {
		if errors.Is(err, t) {
			return Transient
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeClusterIncomplete, codeClusterNotAvailable, codeClusterNotLeader, codeLastSeqPerSubjNotReady,
			codeMaxConsumers, codeDuplicateInProcess:
			return Transient
		case 0:
			// A status without an API error (a pull request's 408, a 503
			// no responders).
			if apiErr.Code == 408 || apiErr.Code == 503 {
				return Transient
			}
		}
		return Permanent
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	return Permanent
}

// IsTransient reports whether err (from a call made with ctx) is a fault
// that a retry may get past.
func IsTransient(ctx context.Context, err error) bool { return Classify(ctx, err) == Transient }

// IsMissing reports whether err says a stream, consumer or bucket does not
// exist.
func IsMissing(err error) bool { return Classify(context.Background(), err) == Missing }

// Backoff bounds for NewBackOff and Retry.
const (
	// InitialInterval is the first pause after a fault.
	InitialInterval = 50 * time.Millisecond
	// MaxInterval is the longest pause between two tries.
	MaxInterval = 5 * time.Second
)

// NewBackOff returns a fresh exponential backoff for one loop or one
// call: from InitialInterval, doubling with jitter, up to maxInterval
// (MaxInterval when 0), never giving up by itself (a loop ends with its
// context; Retry bounds the time). It is not safe for concurrent use.
func NewBackOff(maxInterval time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(InitialInterval),
		backoff.WithMaxInterval(cmpOr(maxInterval, MaxInterval)),
		backoff.WithMaxElapsedTime(0),
	)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Retry calls op until it returns nil or an error that is not Transient,
// pausing with backoff between tries, for at most maxWait (no bound but
// ctx when 0). It returns op's last error: a transient one when time ran
// out, ctx's cause when ctx ended first.
func Retry(ctx context.Context, maxWait time.Duration, op func(ctx context.Context) error) error {
	return RetryRepair(ctx, maxWait, nil, op)
}

// RetryRepair is Retry that also calls repair (when not nil) after a
// failure that is Missing or Transient (a publish to a deleted stream
// finds no responders: it looks transient), and retries a Missing one once
// repair succeeded. repair re-creates what may be missing; it should be
// idempotent and cheap to call often (rate-limit it).
func RetryRepair(ctx context.Context, maxWait time.Duration, repair func(ctx context.Context) error,
	op func(ctx context.Context) error) error {
	b := NewBackOff(time.Second)
	var deadline time.Time
	if maxWait > 0 {
		deadline = time.Now().Add(maxWait)
	}
	for {
		err := op(ctx)
		class := Classify(ctx, err)
		if repair != nil && (class == Missing || class == Transient) {
			if rerr := repair(ctx); rerr == nil && class == Missing {
				class = Transient // re-created: try again
			}
		}
		if class != Transient {
			return err
		}
		d := b.NextBackOff()
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return err
			}
			d = min(d, left)
		}
		if perr := Sleep(ctx, d); perr != nil {
			return errors.Join(err, perr)
		}
	}
}

// Sleep waits d or until ctx ends, returning ctx's cause then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
