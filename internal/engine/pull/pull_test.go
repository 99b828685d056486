package pull_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine/pull"
	"github.com/jetrun/jetrun/internal/engine/settle"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestLoopOutageLogsBounded runs a fetch loop through two outages, its
// stream deleted and then its server shut down, and counts the lines it
// logs: at most one per class of fault per LogEvery, whatever the length
// of the outage. After each outage the loop delivers again.
func TestLoopOutageLogsBounded(t *testing.T) {
	t.Parallel()
	opts := &server.Options{}
	ns := natstest.RunServerWithOptions(t, opts)
	port, storeDir := ns.Addr().(*net.TCPAddr).Port, opts.StoreDir
	var failedReconnects atomic.Int64 // attempts to reach a server that is down
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectErrHandler(func(*nats.Conn, error) { failedReconnects.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streamCfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}
	consumerCfg := jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}
	create := func() jetstream.Consumer {
		t.Helper()
		var cons jetstream.Consumer
		natstest.Eventually(t, 20*time.Second, func() bool {
			s, err := js.CreateOrUpdateStream(ctx, streamCfg)
			if err != nil {
				return false
			}
			cons, err = s.CreateOrUpdateConsumer(ctx, consumerCfg)
			return err == nil
		}, "stream and consumer not created")
		return cons
	}
	cons := create()

	var logs syncBuffer
	const every = time.Second
	got := make(chan string, 100)
	var handlers, loops sync.WaitGroup
	loop := pull.Loop{
		Consumer:    cons,
		Concurrency: 4,
		Handle: func(_ context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
			_ = m.Ack() // before the test goes on to delete the stream
			got <- string(m.Data())
			return settle.Leave()
		},
		Stopped:  func(jetstream.Msg) settle.Outcome { return settle.Retry(0) },
		Handlers: &handlers,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Name:     "c",
		LogEvery: every,
	}
	lctx, stop := context.WithCancel(ctx)
	loops.Add(1)
	go func() {
		defer loops.Done()
		loop.Run(lctx)
	}()
	defer func() {
		stop()
		loops.Wait()
		handlers.Wait()
	}()
	deliver := func(data string) {
		t.Helper()
		natstest.Eventually(t, 20*time.Second, func() bool {
			_, err := js.Publish(ctx, "s.a", []byte(data))
			return err == nil
		}, "publish %s", data)
		select {
		case d := <-got:
			if d != data {
				t.Fatalf("delivered %q, want %q", d, data)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not delivered", data)
		}
	}
	deliver("before")

	// Outage 1: the stream (and its consumer) deleted for a while.
	began := time.Now()
	if err := js.DeleteStream(ctx, "S"); err != nil {
		t.Fatal(err)
	}
	// The outage lasts until the loop has failed six fetches in a row
	// (each a request the connection sent), backing off between them.
	sent := nc.Stats().OutMsgs
	natstest.Eventually(t, 60*time.Second, func() bool { return nc.Stats().OutMsgs >= sent+6 },
		"the loop did not keep fetching while its stream was gone")
	create()
	deliver("after the stream came back")

	// Outage 2: the server shut down for a while, then restarted on the
	// same port and store.
	ns.Shutdown()
	ns.WaitForShutdown()
	// Down until the connection has tried to reach it 10 times.
	tries := failedReconnects.Load()
	natstest.Eventually(t, 60*time.Second, func() bool { return failedReconnects.Load() >= tries+10 },
		"the connection did not try to reconnect")
	natstest.RunServerWithOptions(t, &server.Options{Port: port, StoreDir: storeDir})
	create()
	deliver("after the server came back")
	outage := time.Since(began)

	lines := logs.lines()
	// Three classes at most (transient, missing, permanent), each a line
	// at its first fault and then at most one per interval.
	bound := 3 * (1 + int(outage/every))
	t.Logf("outages of %s in all: %d log lines (bound %d)", outage.Round(time.Millisecond), len(lines), bound)
	for _, l := range lines {
		t.Log(l)
	}
	if len(lines) > bound {
		t.Fatalf("%d log lines during %s of outage, want at most %d", len(lines), outage, bound)
	}
}

// TestParkedHandlerTakesSlotBackAtOnce parks the only handler of a loop at
// concurrency 1 (its slot released), lets the loop lend that slot to a
// fetch that waits for messages, and has the handler take its slot back:
// it gets it at once, well before the fetch's request would expire (issue
// 23: it waited for the idle request to time out). A message that comes
// while the handler holds the slot is not handled beside it: it is handed
// back (Stopped) and handled once the handler is done.
func TestParkedHandlerTakesSlotBackAtOnce(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}

	parked, resume, finish := make(chan struct{}), make(chan struct{}), make(chan struct{})
	done := sync.OnceFunc(func() { close(finish) })
	acquired := make(chan error, 1)
	handled := make(chan string, 10)
	var running, most atomic.Int64
	var handedBack atomic.Int64
	var handlers, loops sync.WaitGroup
	loop := pull.Loop{
		Consumer:    cons,
		Concurrency: 1,
		Handle: func(_ context.Context, m jetstream.Msg, slot *pull.Slot) settle.Outcome {
			n := running.Add(1)
			defer running.Add(-1)
			for old := most.Load(); n > old && !most.CompareAndSwap(old, n); old = most.Load() {
			}
			_ = m.Ack()
			if string(m.Data()) == "parks" {
				running.Add(-1)
				slot.Release()
				close(parked)
				<-resume
				// Well below the fetch's request expiry (5 s).
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := slot.Acquire(actx)
				cancel()
				running.Add(1)
				acquired <- err
				<-finish
			}
			handled <- string(m.Data())
			return settle.Leave()
		},
		Stopped:  func(jetstream.Msg) settle.Outcome { handedBack.Add(1); return settle.Retry(0) },
		Handlers: &handlers,
		Name:     "c",
	}
	lctx, stop := context.WithCancel(ctx)
	loops.Add(1)
	go func() {
		defer loops.Done()
		loop.Run(lctx)
	}()
	defer func() {
		stop()
		done()
		loops.Wait()
		handlers.Wait()
	}()

	if _, err := js.Publish(ctx, "s.a", []byte("parks")); err != nil {
		t.Fatal(err)
	}
	<-parked
	// The loop lends the released slot to a fetch that waits on the server.
	natstest.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumWaiting == 1
	}, "the loop did not fetch with the released slot")
	close(resume)
	if err := <-acquired; err != nil {
		t.Fatalf("the parked handler did not get its slot back before the idle fetch expired: %v", err)
	}

	// The fetch still waits (unless this machine took seconds to get
	// here); what it brings finds the slot taken.
	if _, err := js.Publish(ctx, "s.a", []byte("second")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return handedBack.Load() > 0 || err == nil && info.NumWaiting == 0
	}, "the message the fetch brought was not handed back")
	done()
	for _, want := range []string{"parks", "second"} {
		select {
		case got := <-handled:
			if got != want {
				t.Fatalf("handled %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%q not handled", want)
		}
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d handlers ran at once at concurrency 1", m)
	}
}

// TestLoopSettlesAsTheHandlerSays has the handler return an outcome for
// each message: the loop acknowledges, redelivers and terminates as told.
func TestLoopSettlesAsTheHandlerSays(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var handlers, loops sync.WaitGroup
	loop := pull.Loop{
		Consumer: cons, Concurrency: 2, Handlers: &handlers, Name: "c",
		Handle: func(_ context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
			mu.Lock()
			defer mu.Unlock()
			data := string(m.Data())
			seen[data]++
			switch {
			case data == "term":
				return settle.Term("no")
			case data == "retry" && seen[data] == 1:
				return settle.Retry(0)
			}
			return settle.Ack()
		},
		Stopped: func(jetstream.Msg) settle.Outcome { return settle.Retry(0) },
	}
	lctx, stop := context.WithCancel(ctx)
	loops.Go(func() { loop.Run(lctx) })
	defer func() {
		stop()
		loops.Wait()
		handlers.Wait()
	}()
	for _, data := range []string{"ack", "retry", "term"} {
		if _, err := js.Publish(ctx, "s.a", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == 3
	}, "the messages were not all settled")
	mu.Lock()
	defer mu.Unlock()
	if seen["ack"] != 1 || seen["retry"] != 2 || seen["term"] != 1 {
		t.Fatalf("handled %v, want ack once, retry twice, term once", seen)
	}
}

// A busy loop runs its handlers on goroutines that ran earlier messages'
// (a fresh goroutine's stack is grown, copied, by its first decode), never
// more at once than its concurrency, and those goroutines end with the
// loop.
func TestHandlersReuseGoroutinesWithinTheConcurrency(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	const msgs, concurrency = 300, 3
	for i := range msgs {
		if _, err := js.PublishAsync("s.a", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()

	var (
		mu               sync.Mutex
		goroutines       = map[string]bool{}
		running, most, n int
	)
	handled := make(chan struct{})
	var handlers, loops sync.WaitGroup
	loop := pull.Loop{
		Consumer: cons, Concurrency: concurrency, Handlers: &handlers, Name: "c",
		Handle: func(_ context.Context, m jetstream.Msg, _ *pull.Slot) settle.Outcome {
			buf := make([]byte, 64)
			id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
			mu.Lock()
			goroutines[id] = true
			running++
			most = max(most, running)
			mu.Unlock()
			mu.Lock()
			running--
			if n++; n == msgs {
				close(handled)
			}
			mu.Unlock()
			return settle.Ack()
		},
		Stopped: func(jetstream.Msg) settle.Outcome { return settle.Retry(0) },
	}
	lctx, stop := context.WithCancel(ctx)
	loops.Go(func() { loop.Run(lctx) })
	select {
	case <-handled:
	case <-time.After(time.Minute):
		t.Fatal("not every message was handled")
	}
	stop()
	loops.Wait()
	handlers.Wait() // the goroutines waiting for a next message end with the loop

	mu.Lock()
	defer mu.Unlock()
	if most > concurrency {
		t.Errorf("%d handlers ran at once; the concurrency is %d", most, concurrency)
	}
	// Each fetch hands a batch to the goroutines waiting and starts new
	// ones only for the rest: far fewer goroutines than messages.
	if len(goroutines) > msgs/10 {
		t.Errorf("%d messages ran on %d goroutines: the loop did not reuse them", msgs, len(goroutines))
	}
}

// A handler that gives its slot back before it returns (as a worker's
// attempt does, to write its end outside its slot) still runs on a
// goroutine an earlier message ran on: the loop keeps waiting as many
// goroutines as can run at once, twice its concurrency.
func TestHandlersLeavingTheirSlotsReuseGoroutines(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	const msgs, concurrency = 600, 4
	for i := range msgs {
		if _, err := js.PublishAsync("s.a", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()

	var (
		mu         sync.Mutex
		goroutines = map[string]bool{}
		started, n int
	)
	next := sync.NewCond(&mu)
	handled := make(chan struct{})
	var handlers, loops sync.WaitGroup
	loop := pull.Loop{
		Consumer: cons, Concurrency: concurrency, Handlers: &handlers, Name: "c",
		Handle: func(_ context.Context, m jetstream.Msg, slot *pull.Slot) settle.Outcome {
			buf := make([]byte, 64)
			id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
			mu.Lock()
			defer mu.Unlock()
			goroutines[id] = true
			started++
			mine := started
			next.Broadcast()
			slot.Release()
			// End together with the rest of a group of twice the
			// concurrency, once its last has started (half of them
			// run outside their slots).
			group := (mine - 1) / (2 * concurrency)
			for started < min((group+1)*2*concurrency, msgs) {
				next.Wait()
			}
			if n++; n == msgs {
				close(handled)
			}
			return settle.Ack()
		},
		Stopped: func(jetstream.Msg) settle.Outcome { return settle.Retry(0) },
	}
	lctx, stop := context.WithCancel(ctx)
	loops.Go(func() { loop.Run(lctx) })
	select {
	case <-handled:
	case <-time.After(time.Minute):
		t.Fatal("not every message was handled")
	}
	stop()
	loops.Wait()
	handlers.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(goroutines) > msgs/10 {
		t.Errorf("%d messages ran on %d goroutines: the loop did not reuse them", msgs, len(goroutines))
	}
}
