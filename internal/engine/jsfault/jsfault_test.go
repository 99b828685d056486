package jsfault_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestClassifyServerErrors classifies the errors a real server gives.
func TestClassifyServerErrors(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, MaxMsgSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	kvb, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kvb.Create(ctx, "k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	tests := []struct {
		name string
		ctx  context.Context
		call func(ctx context.Context) error
		want jsfault.Class
	}{
		{"ok", ctx, func(ctx context.Context) error {
			_, err := js.Publish(ctx, "s.b", []byte("2"))
			return err
		}, jsfault.None},
		{"publish without a stream: no response from stream", ctx, func(ctx context.Context) error {
			_, err := js.Publish(ctx, "nostream.a", []byte("x"), jetstream.WithRetryAttempts(0))
			return err
		}, jsfault.Transient},
		{"a stream at its consumer limit", ctx, func(ctx context.Context) error {
			full, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxConsumers: 1})
			if err != nil {
				return err
			}
			if _, err := full.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "one"}); err != nil {
				return err
			}
			_, err = full.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "two"})
			return err
		}, jsfault.Transient},
		{"request without responders", ctx, func(ctx context.Context) error {
			_, err := nc.Request("nobody.listens", nil, time.Second)
			return err
		}, jsfault.Transient},
		{"request timeout", ctx, func(ctx context.Context) error {
			sub, err := nc.SubscribeSync("silent")
			if err != nil {
				return err
			}
			defer sub.Unsubscribe()
			_, err = nc.Request("silent", nil, 20*time.Millisecond)
			return err
		}, jsfault.Transient},
		{"wrong last sequence (fenced)", ctx, func(ctx context.Context) error {
			_, err := js.Publish(ctx, "s.a", []byte("x"), jetstream.WithExpectLastSequencePerSubject(99))
			return err
		}, jsfault.Permanent},
		{"key revision mismatch", ctx, func(ctx context.Context) error {
			_, err := kvb.Update(ctx, "k", []byte("w"), rev+7)
			return err
		}, jsfault.Permanent},
		{"message larger than the stream allows", ctx, func(ctx context.Context) error {
			_, err := js.Publish(ctx, "s.big", make([]byte, 4096))
			return err
		}, jsfault.Permanent},
		{"message larger than the server allows", ctx, func(ctx context.Context) error {
			_, err := js.Publish(ctx, "s.big", make([]byte, 2<<20))
			return err
		}, jsfault.Permanent},
		{"bad request", ctx, func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BAD", Subjects: []string{"s.>"}})
			return err
		}, jsfault.Permanent},
		{"stream not found", ctx, func(ctx context.Context) error {
			_, err := js.Stream(ctx, "NOPE")
			return err
		}, jsfault.Missing},
		{"consumer not found", ctx, func(ctx context.Context) error {
			_, err := s.Consumer(ctx, "nope")
			return err
		}, jsfault.Missing},
		{"bucket not found", ctx, func(ctx context.Context) error {
			_, err := js.KeyValue(ctx, "NOPE")
			return err
		}, jsfault.Missing},
		{"the caller's context cancelled", cancelled, func(ctx context.Context) error {
			_, err := js.Publish(ctx, "s.c", []byte("x"))
			return err
		}, jsfault.Permanent},
	}
	for _, tc := range tests {
		err := tc.call(tc.ctx)
		if got := jsfault.Classify(tc.ctx, err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %s, want %s", tc.name, err, got, tc.want)
		}
	}
}

// TestClassifyServerGone classifies the errors of calls made while the
// server is away: the connection reconnects, requests time out.
func TestClassifyServerGone(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, func() bool { return !nc.IsConnected() }, "client still connected")

	// A publish while reconnecting is buffered and its answer never comes:
	// the API's own timeout, not the caller's.
	_, err = js.Publish(ctx, "s.a", []byte("x"))
	if got := jsfault.Classify(ctx, err); got != jsfault.Transient {
		t.Errorf("publish while the server is down: Classify(%v) = %s, want transient", err, got)
	}
	_, err = js.AccountInfo(ctx)
	if got := jsfault.Classify(ctx, err); got != jsfault.Transient {
		t.Errorf("account info while the server is down: Classify(%v) = %s, want transient", err, got)
	}
	// The same call bounded by the caller's own deadline is the caller's.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = js.Publish(short, "s.a", []byte("x"))
	if got := jsfault.Classify(short, err); err == nil || got != jsfault.Permanent {
		t.Errorf("publish past the caller's deadline: Classify(%v) = %s, want permanent", err, got)
	}

	// A connection without a reconnect buffer fails at once.
	ns2 := natstest.RunServer(t)
	nc2, err := nats.Connect(ns2.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	ns2.Shutdown()
	ns2.WaitForShutdown()
	natstest.Eventually(t, 10*time.Second, func() bool { return !nc2.IsConnected() }, "client still connected")
	_, err = nc2.Request("x", nil, time.Second)
	if got := jsfault.Classify(ctx, err); got != jsfault.Transient {
		t.Errorf("request while reconnecting without a buffer: Classify(%v) = %s, want transient", err, got)
	}
}

// TestClassifyJetStreamDisabled classifies what a server whose JetStream
// went away answers.
func TestClassifyJetStreamDisabled(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := ns.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	_, err := js.Publish(ctx, "s.a", []byte("x"), jetstream.WithRetryAttempts(0))
	if got := jsfault.Classify(ctx, err); got != jsfault.Transient {
		t.Errorf("publish: Classify(%v) = %s, want transient", err, got)
	}
	_, err = js.Stream(ctx, "S")
	if got := jsfault.Classify(ctx, err); got != jsfault.Transient {
		t.Errorf("stream info: Classify(%v) = %s, want transient", err, got)
	}
}

// TestClassifyClusterUnavailable classifies the answers of a cluster that
// lost its quorum.
func TestClassifyClusterUnavailable(t *testing.T) {
	t.Parallel()
	servers := natstest.RunCluster(t)
	nc, err := nats.Connect(servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[1:] {
		s.Shutdown()
		s.WaitForShutdown()
	}
	var errs []string
	for _, call := range []func() error{
		func() error {
			_, err := js.Publish(ctx, "s.a", []byte("x"), jetstream.WithRetryAttempts(0))
			return err
		},
		// A stream without quorum cannot store anything, whatever its
		// leader believes.
		func() error { _, err := js.Publish(ctx, "s.b", []byte("x")); return err },
	} {
		err := call()
		if got := jsfault.Classify(ctx, err); got != jsfault.Transient {
			t.Errorf("Classify(%v) = %s, want transient", err, got)
		}
		errs = append(errs, errString(err))
	}
	t.Logf("errors of a cluster without quorum: %s", strings.Join(errs, "; "))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestClassifyNil(t *testing.T) {
	if got := jsfault.Classify(context.Background(), nil); got != jsfault.None {
		t.Fatalf("Classify(nil) = %s", got)
	}
	if jsfault.IsTransient(context.Background(), errors.New("other")) {
		t.Fatal("an unknown error is transient")
	}
}

// TestRetry retries a transient fault until the server is back.
func TestRetry(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	tries := 0
	err := jsfault.Retry(ctx, 30*time.Second, func(ctx context.Context) error {
		tries++
		if tries == 3 {
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
				return err
			}
		}
		_, err := js.Publish(ctx, "s.a", []byte("x"), jetstream.WithRetryAttempts(0))
		return err
	})
	if err != nil || tries != 3 {
		t.Fatalf("Retry = %v after %d tries, want nil after 3", err, tries)
	}
	// A permanent error is returned at once.
	tries = 0
	err = jsfault.Retry(ctx, 30*time.Second, func(ctx context.Context) error {
		tries++
		_, err := js.Publish(ctx, "s.a", []byte("x"), jetstream.WithExpectLastSequence(99))
		return err
	})
	if err == nil || tries != 1 {
		t.Fatalf("Retry = %v after %d tries, want an error after 1", err, tries)
	}
}

// TestRetryRepair re-creates what is missing, then retries.
func TestRetryRepair(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	repairs := 0
	repair := func(ctx context.Context) error {
		repairs++
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
		return err
	}
	err := jsfault.RetryRepair(ctx, 30*time.Second, repair, func(ctx context.Context) error {
		_, err := js.Stream(ctx, "S") // missing until repaired
		return err
	})
	if err != nil || repairs != 1 {
		t.Fatalf("RetryRepair = %v after %d repairs, want nil after 1", err, repairs)
	}
}

// The server's refusal of a publish or subscription (nats.conf's per-role
// permissions) is permanent: no retry gets past it. It reaches the client
// as an asynchronous error; a request it refused times out.
func TestPermissionViolationIsPermanent(t *testing.T) {
	err := fmt.Errorf("publish: %w: Permissions Violation for Publish to \"jetrun.finish.x\"", nats.ErrPermissionViolation)
	if got := jsfault.Classify(context.Background(), err); got != jsfault.Permanent {
		t.Fatalf("Classify(permissions violation) = %v", got)
	}
}
