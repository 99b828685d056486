package limits_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The kill test runs this test binary a second time as a worker process
// that holds reservations (holderEnv names the server).
const holderEnv = "JETRUN_LIMITS_TEST_HOLDER"

func TestMain(m *testing.M) {
	if url := os.Getenv(holderEnv); url != "" {
		os.Exit(hold(url))
	}
	goleak.VerifyTestMain(m)
}

// hold is the holder process: it reserves every slot of limit "slots",
// says so on stdout and waits to be killed.
func hold(url string) int {
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	js, _ := jetstream.New(nc)
	st, err := limits.Open(ctx, js, ns, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lease, _ := time.ParseDuration(os.Getenv(holderEnv + "_LEASE"))
	n, _ := strconv.Atoi(os.Getenv(holderEnv + "_SLOTS"))
	l, err := limits.New(limits.Config{Store: st, Worker: "doomed", Lease: lease})
	if err == nil {
		err = l.Start(ctx)
	}
	for range n {
		if err == nil {
			_, err = l.Reserve(ctx, "slots", "", 0)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("held")
	select {}
}

// TestKilledWorkersSlotsReturnWithinALease: a worker process holding
// every slot of a limit is killed -9 while another worker waits on the
// limit; the waiter is served once the dead worker's lease lapses, never
// before (the slots are not handed out twice), and the pool forgets it.
func TestKilledWorkersSlotsReturnWithinALease(t *testing.T) {
	t.Parallel()
	s := natstest.RunServer(t)
	st := openStore(t, s)
	ctx := context.Background()
	const slots, lease = 3, 2 * time.Second
	if err := st.Put(ctx, limits.Spec{Name: "slots", Concurrent: slots}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+s.ClientURL(), holderEnv+"_LEASE="+lease.String(),
		holderEnv+"_SLOTS="+strconv.Itoa(slots))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder said %q, want held", line)
	}
	l := startLimiter(t, s, "survivor", lease)
	got := make(chan time.Time, 1)
	go func() {
		g, err := l.Reserve(ctx, "slots", "", 0)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- time.Now()
		g.Release()
	}()
	natstest.Eventually(t, 10*time.Second, func() bool { return l.Waiting("slots") == 1 }, "the survivor waits")
	stat, err := st.Status(ctx, "slots")
	if err != nil {
		t.Fatal(err)
	}
	doomed := stat.Pool.Holders["doomed"]
	if doomed.Concurrent != slots {
		t.Fatalf("the holder holds %d slots, want %d: %s", doomed.Concurrent, slots, js(stat.Pool))
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	var at time.Time
	select {
	case at = <-got:
	case <-time.After(10 * lease):
		t.Fatalf("the survivor was not served within 10 leases of the kill")
	}
	// The holder renewed up to its kill: the slot came back only when its
	// last lease lapsed, so it was never in two hands.
	final, err := st.Status(ctx, "slots")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := final.Pool.Holders["doomed"]; ok {
		t.Errorf("the pool still lists the killed worker: %s", js(final.Pool))
	}
	if at.UnixMilli() < doomed.UntilMs {
		t.Errorf("served at %d, before the killed worker's lease ran out at %d", at.UnixMilli(), doomed.UntilMs)
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
