package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The attacks of issue 35 with a leaked child credential, on the shipped
// nats-users.conf; see docs/operations.md, "What each role can do".

// forgeEnv starts a parent-worker (as parent, with env on top) and a
// child-worker (as child) on the server at url.
func forgeEnv(t *testing.T, url string, env map[string]string) (pw, child *proc) {
	t.Helper()
	pw = start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}, env))
	pw.waitLog("parent-worker ready", 120*time.Second)
	child = start(t, "child-worker", mergeAll(roleEnv(url, "child"), env))
	child.waitLog("child-worker serving", 120*time.Second)
	return pw, child
}

// rowOf returns the row of run id as a map (read as admin), nil if none.
func rowOf(t *testing.T, admin jetstream.JetStream, id string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := admin.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return nil
	}
	var r map[string]any
	if json.Unmarshal(e.Value(), &r) != nil {
		return nil
	}
	return r
}

// completedRows counts the runs of ids whose row says completed.
func completedRows(t *testing.T, admin jetstream.JetStream, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		if r := rowOf(t, admin, id); r != nil && r["status"] == "completed" {
			n++
		}
	}
	return n
}

// publishDispatches publishes one demo dispatch per id as producer.
func publishDispatches(t *testing.T, url string, ids []string) {
	t.Helper()
	js := jsAs(t, url, "producer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		d := fmt.Sprintf(`{"runId":%q,"input":{"steps":1,"stepMs":1}}`, id)
		if _, err := js.Publish(ctx, "jetrun.dispatch.demo", []byte(d), jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("producer: dispatch %s: %v", id, err)
		}
	}
}

// pullOnce makes one pull request on durable consumer agent-demo as js
// does (a worker's fetch): a consumer re-pointed at a subject nothing uses
// moves past every dispatch stored meanwhile when it serves one. Whatever
// it hands out is given back at once, so the pull takes nothing away.
func pullOnce(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, "JETRUN_DISPATCH", "agent-demo")
	if err != nil {
		t.Fatalf("bind agent-demo: %v", err)
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatalf("pull agent-demo: %v", err)
	}
	for m := range batch.Messages() {
		_ = m.Nak()
	}
}

// repointTo re-points consumer agent-demo at jetrun.dispatch.nobody as js,
// its other settings as they are (read as admin): what
// CONSUMER.CREATE.JETRUN_DISPATCH.agent-demo.jetrun.dispatch.nobody does.
func repointTo(ctx context.Context, admin, js jetstream.JetStream) error {
	c, err := admin.Consumer(ctx, "JETRUN_DISPATCH", "agent-demo")
	if err != nil {
		return err
	}
	cfg := c.CachedInfo().Config
	cfg.FilterSubject = "jetrun.dispatch.nobody"
	_, err = js.UpdateConsumer(ctx, "JETRUN_DISPATCH", cfg)
	return err
}

// Item 1 of issue 35: a child may not create or change a dispatch
// consumer, so it cannot re-point agent-demo at a subject nothing uses;
// the 20 dispatches published after its try all run.
func TestRolesChildCannotRepointADispatchConsumer(t *testing.T) {
	t.Parallel()
	repointRefused(t, roleServer(t), nil)
}

// repointRefused is TestRolesChildCannotRepointADispatchConsumer on the
// server at url, the processes started with env on top of their roles'.
func repointRefused(t *testing.T, url string, env map[string]string) {
	forgeEnv(t, url, env)
	admin := jsAs(t, url, "admin")
	child := jsAs(t, url, "child")
	natstest.Eventually(t, 30*time.Second, func() bool { return consumerFilter(t, admin, "JETRUN_DISPATCH", "agent-demo") != "" },
		"consumer agent-demo does not exist")

	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("repoint-%02d", i)
	}
	// The attack: re-point, dispatches stored meanwhile, re-point again
	// (the child-workers may have restored it), and a pull.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	repointed := repointTo(ctx, admin, child) == nil
	publishDispatches(t, url, ids)
	repointed = repointTo(ctx, admin, child) == nil || repointed
	pullOnce(t, child)
	if repointed {
		t.Errorf("child re-pointed consumer agent-demo")
	}
	deadline := time.Now().Add(60 * time.Second)
	for n := completedRows(t, admin, ids); n < len(ids); n = completedRows(t, admin, ids) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d dispatches published after the child's re-point completed", n, len(ids))
		}
		time.Sleep(200 * time.Millisecond) // polling the rows
	}
	refused(t, url, "child", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.agent-demo.jetrun.dispatch.nobody")
	refused(t, url, "child", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.agent-x")
	refused(t, url, "child", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH")
	refused(t, url, "child-nesting", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.agent-demo.jetrun.dispatch.nobody")
}

// Item 1 of issue 35: a dispatch consumer re-pointed by a credential that
// may (admin) moves past the dispatches stored meanwhile; restoring it
// finds them again: every one of the 20 runs, and the restore is counted.
func TestRolesSkippedDispatchesAreFoundAgain(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	pw, _ := forgeEnv(t, url, nil)
	admin := jsAs(t, url, "admin")
	natstest.Eventually(t, 30*time.Second, func() bool { return consumerFilter(t, admin, "JETRUN_DISPATCH", "agent-demo") != "" },
		"consumer agent-demo does not exist")
	want := consumerFilter(t, admin, "JETRUN_DISPATCH", "agent-demo")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("skipped-%02d", i)
	}
	// Re-point, dispatches stored meanwhile, re-point again (it may have
	// been restored already), and a pull: the consumer moves past them.
	if err := repointTo(ctx, admin, admin); err != nil {
		t.Fatal(err)
	}
	publishDispatches(t, url, ids)
	if err := repointTo(ctx, admin, admin); err != nil {
		t.Fatal(err)
	}
	pullOnce(t, admin)
	natstest.Eventually(t, 30*time.Second, func() bool { return consumerFilter(t, admin, "JETRUN_DISPATCH", "agent-demo") == want },
		"consumer agent-demo was not restored")
	deadline := time.Now().Add(60 * time.Second)
	for n := completedRows(t, admin, ids); n < len(ids); n = completedRows(t, admin, ids) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d dispatches skipped by the re-pointed consumer completed", n, len(ids))
		}
		time.Sleep(200 * time.Millisecond) // polling the rows
	}
	if !strings.Contains(pw.stderr.String(), "durable consumer restored") {
		t.Errorf("parent-worker did not say it restored agent-demo:\n%s", pw.stderr)
	}
}

// finishCall is one call a recordingHook received.
type finishCall struct {
	Key     string
	RunID   string `json:"runId"`
	Status  string `json:"status"`
	Summary string `json:"summary"`
}

// recordingHook is a finish webhook that records every call, whatever its
// idempotency key.
type recordingHook struct {
	*httptest.Server
	mu    sync.Mutex
	calls []finishCall
}

func newRecordingHook(t *testing.T) *recordingHook {
	h := &recordingHook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c finishCall
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		c.Key = r.Header.Get("Idempotency-Key")
		h.mu.Lock()
		h.calls = append(h.calls, c)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

// keys returns the idempotency keys of the calls so far, in order.
func (h *recordingHook) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		out = append(out, c.Key)
	}
	return out
}

// forgeFinish rewrites run id's final row as child (set changes it) and
// publishes, as child, a status event saying the run owes a completed
// finish.
func forgeFinish(t *testing.T, url string, admin jetstream.JetStream, id string, set func(r map[string]any)) {
	t.Helper()
	child := jsAs(t, url, "child")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := child.KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	r := rowOf(t, admin, id)
	set(r)
	data, _ := json.Marshal(r)
	if _, err := kv.Put(ctx, id, data); err != nil {
		t.Fatalf("child: forge row %s: %v", id, err)
	}
	ev := fmt.Sprintf(`{"runId":%q,"status":"completed","attempt":%v,"at":%q}`, id, r["attempt"], time.Now().Format(time.RFC3339Nano))
	m := &nats.Msg{Subject: "jetrun.run." + id + ".status", Data: []byte(ev), Header: nats.Header{}}
	m.Header.Set("Jetrun-Finish-Owed", "completed")
	if _, err := child.PublishMsg(ctx, m); err != nil {
		t.Fatalf("child: forge status event of %s: %v", id, err)
	}
}

// sweepCount is how many reconcile sweeps the parent-worker serving
// metrics on addr has made (-1 when it does not answer).
func sweepCount(t *testing.T, addr string) int {
	t.Helper()
	for _, l := range strings.Split(httpGet(t, "http://"+addr+"/metrics"), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "jetrun_reconcile_sweep_duration_seconds_count %d", &n); err == nil {
			return n
		}
	}
	return -1
}

// Item 2 of issue 35: a child rewrites a final row's finish ledger and
// publishes a status event with the finish-owed header. Neither a second
// finish of a delivered run (a new idempotency key, a forged output) nor a
// first finish of a run that never had an onFinish reaches the webhook;
// the parent-worker says so, and both rows come back to their ledgers.
func TestRolesForgedFinishesAreNotDelivered(t *testing.T) {
	t.Parallel()
	forgedFinishesRefused(t, roleServer(t), nil)
}

// forgedFinishesRefused is TestRolesForgedFinishesAreNotDelivered on the
// server at url, the processes started with env on top of their roles'.
func forgedFinishesRefused(t *testing.T, url string, env map[string]string) {
	hook := newRecordingHook(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw, _ := forgeEnv(t, url, mergeAll(map[string]string{"JETRUN_FINISH_WEBHOOKS": "hook=" + hook.URL,
		"JETRUN_RECONCILE_INTERVAL": "1s", "JETRUN_HTTP_ADDR": addr}, env))
	admin := jsAs(t, url, "admin")
	producer := jsAs(t, url, "producer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range []string{
		`{"runId":"forge-delivered","input":{"steps":1,"stepMs":1},"detached":{"onFinish":"hook"}}`,
		`{"runId":"forge-plain","input":{"steps":1,"stepMs":1}}`,
	} {
		if _, err := producer.Publish(ctx, "jetrun.dispatch.demo", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		r := rowOf(t, admin, "forge-delivered")
		d, _ := r["delivered"].(map[string]any)
		return d["completed"] != nil && completedRows(t, admin, []string{"forge-plain"}) == 1
	}, "the runs did not complete and deliver")

	forgeFinish(t, url, admin, "forge-delivered", func(r map[string]any) {
		f := r["finishes"].(map[string]any)["completed"].(map[string]any)
		f["ending"], f["resumed"], f["attempts"] = 1, true, 0
		delete(r, "delivered")
		r["summary"], r["output"] = "forged summary", map[string]any{"forged": true}
	})
	forgeFinish(t, url, admin, "forge-plain", func(r map[string]any) {
		r["detached"] = map[string]any{"onFinish": "hook"}
		r["finishes"] = map[string]any{"completed": map[string]any{"dueAt": time.Now().Format(time.RFC3339Nano)}}
	})
	// The refusals, or a forged finish delivered: whichever comes first.
	natstest.Eventually(t, 60*time.Second, func() bool {
		return len(hook.keys()) > 1 || strings.Count(pw.stderr.String(), "a finish no jetrun transition owes") >= 2
	}, "the parent-worker neither delivered nor refused the forged finishes:\n%s", pw.stderr)
	// Two more reconcile sweeps: the rows owe nothing the reconciler republishes.
	sweeps := sweepCount(t, addr)
	natstest.Eventually(t, 30*time.Second, func() bool { return sweepCount(t, addr) >= sweeps+2 },
		"the reconciler did not sweep")
	if got := hook.keys(); len(got) != 1 || got[0] != "forge-delivered.completed" {
		t.Fatalf("the webhook got %v; want only the run's real finish, forge-delivered.completed", got)
	}
}

// putRowAs writes run id's row (read as admin) changed by set, as child,
// without the compare-and-set.
func putRowAs(t *testing.T, url string, admin jetstream.JetStream, id string, set func(r map[string]any)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := jsAs(t, url, "child").KeyValue(ctx, "jetrun_runs")
	if err != nil {
		t.Fatal(err)
	}
	r := rowOf(t, admin, id)
	set(r)
	data, _ := json.Marshal(r)
	if _, err := kv.Put(ctx, id, data); err != nil {
		t.Fatalf("child: forge row %s: %v", id, err)
	}
}

// Item 3 of issue 35: a child rewrites a completed row to another final
// status, then publishes a junk status event and rewrites the row to
// running. Both come back to the run's real ending, the first final status
// event (the junk after it changes nothing), each said at ERROR and
// counted.
func TestRolesForgedEndingIsRepairedPastJunkEvents(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw, _ := forgeEnv(t, url, map[string]string{"JETRUN_HTTP_ADDR": addr})
	admin := jsAs(t, url, "admin")
	publishDispatches(t, url, []string{"forged-end"})
	real := func() bool {
		r := rowOf(t, admin, "forged-end")
		return r != nil && r["status"] == "completed" && r["reason"] == nil && r["error"] == nil && r["attempt"] == float64(1)
	}
	natstest.Eventually(t, 60*time.Second, real, "the run did not complete")

	putRowAs(t, url, admin, "forged-end", func(r map[string]any) {
		r["status"], r["reason"], r["error"], r["attempt"] = "error", "forged", "forged", 7
	})
	natstest.Eventually(t, 30*time.Second, real, "the row rewritten to error was not repaired: %v", rowOf(t, admin, "forged-end"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := jsAs(t, url, "child").Publish(ctx, "jetrun.run.forged-end.status", []byte(`{}`)); err != nil {
		t.Fatalf("child: publish a junk status event: %v", err)
	}
	putRowAs(t, url, admin, "forged-end", func(r map[string]any) { r["status"] = "running" })
	natstest.Eventually(t, 30*time.Second, real, "the row rewritten to running after a junk event was not repaired: %v",
		rowOf(t, admin, "forged-end"))
	// The row is restored before the repair is logged: wait for the line.
	repairs := func() int {
		return strings.Count(pw.stderr.String(), "a final row was rewritten by someone outside jetrun")
	}
	natstest.Eventually(t, 10*time.Second, func() bool { return repairs() >= 2 },
		"parent-worker did not say twice that it repaired a row:\n%s", pw.stderr)
	if n := repairs(); n != 2 {
		t.Errorf("parent-worker said %d times that it repaired a row, want 2:\n%s", n, pw.stderr)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(httpGet(t, "http://"+addr+"/metrics"), "jetrun_rows_repaired_total 2")
	}, "/metrics does not count the 2 repairs")
}

// Item 3 of issue 35: a dispatch consumer deleted (by admin: no other role
// may) is created again, counted in jetrun_consumers_restored_total and
// said at ERROR; the runs dispatched meanwhile run.
func TestRolesDeletedDispatchConsumerIsCounted(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	pw, _ := forgeEnv(t, url, map[string]string{"JETRUN_HTTP_ADDR": addr})
	admin := jsAs(t, url, "admin")
	natstest.Eventually(t, 30*time.Second, func() bool { return consumerFilter(t, admin, "JETRUN_DISPATCH", "agent-demo") != "" },
		"consumer agent-demo does not exist")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.DeleteConsumer(ctx, "JETRUN_DISPATCH", "agent-demo"); err != nil {
		t.Fatal(err)
	}
	ids := []string{"deleted-0", "deleted-1", "deleted-2", "deleted-3", "deleted-4"}
	publishDispatches(t, url, ids)
	natstest.Eventually(t, 60*time.Second, func() bool { return completedRows(t, admin, ids) == len(ids) },
		"the runs dispatched while agent-demo was deleted did not complete")
	natstest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(httpGet(t, "http://"+addr+"/metrics"),
			`jetrun_consumers_restored_total{consumer="agent-demo",reason="missing"} 1`)
	}, "/metrics does not count the restored consumer:\n%s", httpGet(t, "http://"+addr+"/metrics"))
	if !strings.Contains(pw.stderr.String(), "durable consumer restored") {
		t.Errorf("parent-worker did not say at ERROR that it restored agent-demo:\n%s", pw.stderr)
	}
}
