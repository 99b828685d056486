package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The attacks of issue 22 on the shipped nats-users.conf, as the role that
// tries them; see docs/operations.md, "What each role can do".

// jsAs returns a JetStream context connected as user.
func jsAs(t *testing.T, url, user string) jetstream.JetStream {
	t.Helper()
	nc, err := roleConn(url, user, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// bucketKeys lists the keys of bucket (read as admin).
func bucketKeys(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !strings.Contains(err.Error(), "no keys found") {
		t.Fatalf("keys of %s: %v", bucket, err)
	}
	slices.Sort(keys)
	return keys
}

// rollupRefused puts keys in jetrun's buckets as admin, then, as child,
// publishes `{}` with Nats-Rollup: all to one key of each: the write is
// refused and every key is still there.
func rollupRefused(t *testing.T, url string) {
	t.Helper()
	admin := jsAs(t, url, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for bucket, victim := range map[string]string{"jetrun_runs": "x", "jetrun_active": "run.x"} {
		kv, err := admin.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := kv.Put(ctx, fmt.Sprintf("keep%d", i), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		before := bucketKeys(t, admin, bucket)
		m := &nats.Msg{Subject: wire.BucketSubject(bucket, victim), Data: []byte(`{}`), Header: nats.Header{}}
		m.Header.Set("Nats-Rollup", "all")
		if _, err := jsAs(t, url, "child").PublishMsg(ctx, m); err == nil || !strings.Contains(err.Error(), "rollup") {
			t.Errorf("child: a roll-up write to %s was not refused: %v", m.Subject, err)
		}
		if after := bucketKeys(t, admin, bucket); !slices.Equal(before, after) {
			t.Errorf("bucket %s: keys %v before the roll-up, %v after", bucket, before, after)
		}
	}
	for _, b := range []string{"jetrun_runs", "jetrun_active", "jetrun_agents", "jetrun_asks"} {
		s, err := admin.Stream(ctx, wire.BucketStream(b))
		if err != nil {
			t.Fatal(err)
		}
		if !bucket.Hardened(s.CachedInfo().Config) {
			t.Errorf("bucket %s allows roll-ups", b)
		}
	}
}

// A child cannot erase a bucket with one roll-up message, on the shipped
// nats.conf.
func TestRolesChildCannotRollUpABucket(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	rollupRefused(t, url)
}

// Buckets an earlier jetrun created (roll-ups allowed, the server's expiry
// markers on) are migrated when a parent-worker starts: it says so, and the
// roll-up is refused from then on.
func TestRolesOldBucketsAreMigratedAtStart(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	admin := jsAs(t, url, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []string{"jetrun_runs", "jetrun_active", "jetrun_agents"} {
		// As the code before issue 22 created them.
		if _, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1,
			Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	for _, b := range []string{"jetrun_runs", "jetrun_active", "jetrun_agents"} {
		if !strings.Contains(pw.stderr.String(), "bucket migrated: roll-ups refused from now on\" bucket="+b) {
			t.Errorf("parent-worker did not say it migrated %s", b)
		}
	}
	rollupRefused(t, url)
}

// consumerFilter returns the filter of durable consumer name on stream
// (read as admin), "" if it does not exist.
func consumerFilter(t *testing.T, admin jetstream.JetStream, stream, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := admin.Consumer(ctx, stream, name)
	if err != nil {
		return ""
	}
	return c.CachedInfo().Config.FilterSubject
}

// repoint updates durable consumer name on stream to a subject nothing
// uses, as user.
func repoint(ctx context.Context, admin, as jetstream.JetStream, stream, name string) error {
	c, err := admin.Consumer(ctx, stream, name)
	if err != nil {
		return err
	}
	cfg := c.CachedInfo().Config
	cfg.FilterSubject = strings.TrimSuffix(cfg.FilterSubject, ">") + "nothing"
	if strings.HasSuffix(cfg.FilterSubject, "*.status") {
		cfg.FilterSubject = "jetrun.run.nothing.status"
	}
	_, err = as.UpdateConsumer(ctx, stream, cfg)
	return err
}

// No role but admin (and parent, which creates them) may delete or change
// the durable consumers jetrun's processes pull from. A consumer deleted
// or re-pointed by admin is restored by the parent-worker, and the meter
// still reports run.finished for every run.
func TestRolesCannotDeleteOrRepointConsumers(t *testing.T) {
	t.Parallel()
	consumersKept(t, roleServer(t), nil)
}

// consumersKept is TestRolesCannotDeleteOrRepointConsumers on the server
// at url, the processes started with env on top of their roles'.
func consumersKept(t *testing.T, url string, env map[string]string) {
	hook := newHookServer(t) // a finish handler: the deliverer then follows milestones too
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"),
		map[string]string{"JETRUN_HTTP_ADDR": "", "JETRUN_FINISH_WEBHOOKS": "hook=" + hook.URL}, env))
	pw.waitLog("parent-worker ready", 120*time.Second)
	child := start(t, "child-worker", mergeAll(roleEnv(url, "child"), env))
	child.waitLog("child-worker serving", 120*time.Second)
	admin := jsAs(t, url, "admin")

	// Run finishes, as the meter reports them, seen by a viewer.
	viewer, err := roleConn(url, "viewer", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	finished := make(chan string, 1024)
	sub, err := viewer.Subscribe("jetrun.obs.run.finished", func(m *nats.Msg) {
		var ev struct {
			RunID string `json:"runId"`
		}
		if json.Unmarshal(m.Data, &ev) == nil {
			finished <- ev.RunID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = viewer.Flush()

	durables := map[string][]string{
		"JETRUN_EVENTS":   {"meter", "milestone-notices"},
		"JETRUN_DISPATCH": {"agent-demo", "dispatch-malformed"},
	}
	filters := map[string]string{}
	for stream, names := range durables {
		for _, name := range names {
			natstest.Eventually(t, 20*time.Second, func() bool { return consumerFilter(t, admin, stream, name) != "" },
				"consumer %s of %s does not exist", name, stream)
			filters[name] = consumerFilter(t, admin, stream, name)
		}
	}
	// Refused: deletes by viewer, producer and child; updates of the
	// events consumers by all three.
	for _, user := range []string{"viewer", "producer", "child"} {
		js := jsAs(t, url, user)
		for stream, names := range durables {
			for _, name := range names {
				if stream == "JETRUN_DISPATCH" && user != "child" {
					continue // not even visible to them (TestRolesRefuseWhatTheyMayNotDo)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				if err := js.DeleteConsumer(ctx, stream, name); err == nil {
					t.Errorf("%s deleted consumer %s", user, name)
				}
				if stream == "JETRUN_EVENTS" {
					if err := repoint(ctx, admin, js, stream, name); err == nil {
						t.Errorf("%s re-pointed consumer %s", user, name)
					}
				}
				cancel()
			}
		}
	}
	for _, s := range []string{
		"$JS.API.CONSUMER.DELETE.JETRUN_EVENTS.meter", "$JS.API.CONSUMER.CREATE.JETRUN_EVENTS.meter.jetrun.x",
		"$JS.API.CONSUMER.MSG.NEXT.JETRUN_EVENTS.meter", "$JS.API.CONSUMER.DELETE.JETRUN_EVENTS.milestone-notices",
	} {
		refused(t, url, "viewer", s)
		refused(t, url, "producer", s)
		refused(t, url, "child", s)
	}
	refused(t, url, "child", "$JS.API.CONSUMER.DELETE.JETRUN_DISPATCH.agent-demo")
	refused(t, url, "child", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.agent-demo.jetrun.x")
	refused(t, url, "child", "$JS.API.CONSUMER.DURABLE.CREATE.JETRUN_DISPATCH.agent-demo")
	refused(t, url, "child", "$JS.API.CONSUMER.PAUSE.JETRUN_DISPATCH.agent-demo")
	refused(t, url, "child", "$JS.API.CONSUMER.RESET.JETRUN_DISPATCH.agent-demo")
	for stream, names := range durables {
		for _, name := range names {
			if got := consumerFilter(t, admin, stream, name); got != filters[name] {
				t.Errorf("consumer %s: filter %q, was %q", name, got, filters[name])
			}
		}
	}

	// What gets through is undone: admin re-points agent-demo, deletes
	// and re-points the meter. Runs dispatched meanwhile run, and each is
	// metered.
	dispatch := func(from, to int) {
		for i := from; i < to; i++ {
			d := fmt.Sprintf(`{"runId":"cons-%02d","input":{"steps":1,"stepMs":1}}`, i)
			if out, err := natsAs(t, url, "producer", 20*time.Second, "pub", "jetrun.dispatch.demo", d); err != nil {
				t.Fatalf("producer: nats pub: %v\n%s", err, out)
			}
		}
	}
	restoredTo := func(stream, name string) {
		natstest.Eventually(t, 30*time.Second, func() bool { return consumerFilter(t, admin, stream, name) == filters[name] },
			"consumer %s was not restored", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := repoint(ctx, admin, admin, "JETRUN_DISPATCH", "agent-demo"); err != nil {
		t.Fatal(err)
	}
	dispatch(0, 10)
	restoredTo("JETRUN_DISPATCH", "agent-demo")
	if err := admin.DeleteConsumer(ctx, "JETRUN_EVENTS", "meter"); err != nil {
		t.Fatal(err)
	}
	dispatch(10, 20)
	restoredTo("JETRUN_EVENTS", "meter")
	if err := repoint(ctx, admin, admin, "JETRUN_EVENTS", "meter"); err != nil {
		t.Fatal(err)
	}
	dispatch(20, 30)
	restoredTo("JETRUN_EVENTS", "meter")
	seen := map[string]bool{}
	deadline := time.After(90 * time.Second)
	for len(seen) < 30 {
		select {
		case id := <-finished:
			seen[id] = true
		case <-deadline:
			t.Fatalf("the meter reported run.finished for %d of 30 runs: %v", len(seen), seen)
		}
	}
	if !strings.Contains(pw.stderr.String(), "durable consumer restored") {
		t.Errorf("parent-worker did not say it restored a consumer")
	}
}

// A child credential may write any row (subjects cannot name "the runs it
// holds"; the compare-and-set fences jetrun's own writers only): it
// rewrites a completed run's row to running, attempt 99, without the
// compare-and-set header. The parent-worker sees the row leave its final
// status, restores it from the run's final status event, says so loudly
// and counts it; whoever reads the run sees its real result.
func TestRolesForgedFinalRowIsRepaired(t *testing.T) {
	t.Parallel()
	forgedRowRepaired(t, roleServer(t), nil)
}

// forgedRowRepaired is TestRolesForgedFinalRowIsRepaired on the server at
// url, the processes started with env on top of their roles'.
func forgedRowRepaired(t *testing.T, url string, env map[string]string) {
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": addr}, env))
	pw.waitLog("parent-worker ready", 120*time.Second)
	start(t, "child-worker", mergeAll(roleEnv(url, "child"), env)).waitLog("child-worker serving", 120*time.Second)
	if out, err := natsAs(t, url, "producer", 20*time.Second, "pub", "jetrun.dispatch.demo",
		`{"runId":"forged","input":{"steps":2,"stepMs":1}}`); err != nil {
		t.Fatalf("producer: nats pub: %v\n%s", err, out)
	}
	row := func() map[string]any {
		out, err := natsAs(t, url, "viewer", 10*time.Second, "kv", "get", "jetrun_runs", "forged", "--raw")
		var r map[string]any
		if err != nil || json.Unmarshal([]byte(out), &r) != nil {
			return nil
		}
		return r
	}
	natstest.Eventually(t, 60*time.Second, func() bool { r := row(); return r != nil && r["status"] == "completed" },
		"the run did not complete")

	// The forgery, as child: no compare-and-set header.
	child := jsAs(t, url, "child")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := child.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	forged := row()
	forged["status"], forged["attempt"] = "running", 99
	data, _ := json.Marshal(forged)
	if _, err := kv.Put(ctx, "forged", data); err != nil {
		t.Fatalf("child: forge the row: %v", err)
	}

	natstest.Eventually(t, 30*time.Second, func() bool {
		r := row()
		return r != nil && r["status"] == "completed" && r["attempt"] != float64(99) && r["summary"] == "finished 2 steps"
	}, "the forged row was not repaired: %v", row())
	if !strings.Contains(pw.stderr.String(), "a final row was rewritten by someone outside jetrun") {
		t.Errorf("parent-worker did not say it repaired a row:\n%s", pw.stderr)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(httpGet(t, "http://"+addr+"/metrics"), "jetrun_rows_repaired_total 1")
	}, "/metrics does not count the repair")
}

// httpGet returns the body of GET url ("" when it fails).
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
