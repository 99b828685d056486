package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// roleServer runs a nats-server with the shipped nats.conf (its users and
// permissions as they are; only the port is moved aside) and returns its
// URL.
func roleServer(t *testing.T) string {
	t.Helper()
	conf, err := filepath.Abs("../../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	port := natstest.FreePort(t)
	start(t, "nats-server", nil, "-c", conf, "-p", fmt.Sprint(port))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	natstest.Eventually(t, 20*time.Second, func() bool {
		nc, err := roleConn(url, "viewer", nil)
		if err == nil {
			nc.Close()
		}
		return err == nil
	}, "nats-server -c nats.conf did not come up")
	return url
}

// rolePasswords are the placeholders of the shipped nats.conf.
var rolePasswords = map[string]string{
	"parent": "change-me-parent", "child": "change-me-child", "producer": "change-me-producer",
	"viewer": "change-me-viewer", "child-nesting": "change-me-child-nesting", "admin": "change-me-admin",
}

func roleEnv(url, user string) map[string]string {
	return map[string]string{"JETRUN_NATS_URL": url, "JETRUN_NATS_USER": user, "JETRUN_NATS_PASSWORD": rolePasswords[user]}
}

// roleConn connects as user; async errors (permission violations) go to errs.
func roleConn(url, user string, errs chan<- error) (*nats.Conn, error) {
	return nats.Connect(url, nats.UserInfo(user, rolePasswords[user]), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errs != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}))
}

// refused publishes to subject as user and requires the server to refuse
// it (a permissions violation naming the subject).
func refused(t *testing.T, url, user, subject string) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := roleConn(url, user, errs)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Errorf("%s may publish to %s; the role must not", user, subject)
			return
		}
	}
}

// natsAs runs the nats CLI as user.
func natsAs(t *testing.T, url, user string, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args = append([]string{"--server", url, "--user", user, "--password", rolePasswords[user]}, args...)
	cmd := exec.CommandContext(ctx, natsCLI(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The shipped nats.conf's roles split across processes: parent-worker as
// parent, child-worker as child, dispatches published as producer with the
// nats CLI, the runs watched as viewer. A detached run's finish is
// delivered once, by the finisher (the reconciler is too slow to be the
// one), and an awaited run completes.
func TestRolesSplitAcrossProcessesRunTheLifecycle(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	hook := newHookServer(t)
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{
		"JETRUN_HTTP_ADDR": "", "JETRUN_FINISH_WEBHOOKS": "hook=" + hook.URL,
		// Finishes must come from the finisher, not a sweep's republish.
		"JETRUN_RECONCILE_INTERVAL": "60s",
	}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	child := start(t, "child-worker", mergeAll(roleEnv(url, "child"), map[string]string{"JETRUN_WORKER_ID": "roles-child"}))
	child.waitLog("child-worker serving", 60*time.Second)
	// The reconciler (as parent) asks the child-worker which runs it no
	// longer executes, and the child may answer (docs/leases.md).
	if out, err := natsAs(t, url, "parent", 20*time.Second, "request", "jetrun.worker.roles-child.holds", `{"runs":["nobody"]}`); err != nil ||
		!strings.Contains(out, `"notExecuted":["nobody"]`) {
		t.Fatalf("parent: nats request jetrun.worker.roles-child.holds: %v\n%s", err, out)
	}

	// The viewer follows rows and events from the start.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, natsCLI(t), "--server", url, "--user", "viewer", "--password", rolePasswords["viewer"],
		"kv", "watch", "jetrun_runs")
	watchOut := &syncBuffer{}
	watch.Stdout, watch.Stderr = watchOut, watchOut
	sub := exec.CommandContext(ctx, natsCLI(t), "--server", url, "--user", "viewer", "--password", rolePasswords["viewer"],
		"sub", "jetrun.run.>")
	subOut := &syncBuffer{}
	sub.Stdout, sub.Stderr = subOut, subOut
	for _, c := range []*exec.Cmd{watch, sub} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { cancel(); _ = watch.Wait(); _ = sub.Wait() }()
	natstest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(subOut.String(), "Subscribing")
	}, "the viewer's subscription did not start:\n%s", subOut)

	began := time.Now()
	for _, d := range []string{
		`{"runId":"roles-detached","input":{"steps":2,"stepMs":10},"detached":{"onFinish":"hook"}}`,
		`{"runId":"roles-awaited","input":{"steps":2,"stepMs":10}}`,
	} {
		if out, err := natsAs(t, url, "producer", 20*time.Second, "pub", "jetrun.dispatch.demo", d); err != nil {
			t.Fatalf("producer: nats pub: %v\n%s", err, out)
		}
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return hook.count("roles-detached.completed") >= 1 },
		"the detached run's finish was not delivered")
	if took := time.Since(began); took > 30*time.Second {
		t.Fatalf("finish took %s", took)
	}
	// The producer reads the row and replays the awaited run to its end.
	natstest.Eventually(t, 30*time.Second, func() bool {
		out, err := natsAs(t, url, "producer", 10*time.Second, "kv", "get", "jetrun_runs", "roles-awaited", "--raw")
		return err == nil && strings.Contains(out, `"status":"completed"`)
	}, "the awaited run did not complete")
	for _, user := range []string{"producer", "viewer"} {
		cmd := exec.Command(filepath.Join(bin, "jetrun"), "replay", "roles-awaited")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		for k, v := range roleEnv(url, user) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "completed") {
			t.Fatalf("%s: jetrun replay: %v\n%s", user, err, out)
		}
	}
	for _, args := range [][]string{
		{"kv", "get", "jetrun_runs", "roles-detached", "--raw"},
		{"stream", "get", "JETRUN_EVENTS", "--last-for", "jetrun.run.roles-detached.status"},
	} {
		if out, err := natsAs(t, url, "viewer", 20*time.Second, args...); err != nil || !strings.Contains(out, "roles-detached") {
			t.Fatalf("viewer: nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(watchOut.String(), "roles-awaited") && strings.Contains(subOut.String(), "jetrun.run.roles-awaited.status")
	}, "the viewer did not see the runs:\n%s\n%s", watchOut, subOut)

	// Exactly once: once the row records the delivery, a copy delivered
	// again finds it there and calls nothing.
	natstest.Eventually(t, 30*time.Second, func() bool {
		out, err := natsAs(t, url, "producer", 10*time.Second, "kv", "get", "jetrun_runs", "roles-detached", "--raw")
		return err == nil && strings.Contains(out, `"delivered":{"completed"`)
	}, "the row never recorded the finish as delivered")
	if n := hook.count("roles-detached.completed"); n != 1 {
		t.Fatalf("the finish was delivered %d times", n)
	}
	// Clearing (the parent's purges of a run's events, signals, index
	// entries and dispatch) works as parent.
	cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer ccancel()
	clear := exec.CommandContext(cctx, filepath.Join(bin, "jetrun"), "clear", "--all")
	clear.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range roleEnv(url, "parent") {
		clear.Env = append(clear.Env, k+"="+v)
	}
	if out, err := clear.CombinedOutput(); err != nil || !strings.Contains(string(out), "cleared 2 runs") {
		t.Fatalf("parent: jetrun clear --all: %v\n%s", err, out)
	}
	if out, err := natsAs(t, url, "viewer", 10*time.Second, "stream", "get", "JETRUN_EVENTS", "--last-for", "jetrun.run.roles-awaited.status"); err == nil {
		t.Fatalf("the cleared run's events are still there:\n%s", out)
	}
	for _, p := range []*proc{pw, child} {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "permissions violation") {
				t.Errorf("%s was refused something its role needs: %s", p.name, l)
			}
		}
	}
}

// Each role is refused what it must not do, by the server, with the
// shipped nats.conf.
func TestRolesRefuseWhatTheyMayNotDo(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	// A parent-worker creates the streams and buckets.
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)

	cannot := map[string][]string{
		"producer": {
			"$KV.jetrun_runs.x", "$KV.jetrun_active.run.x", "jetrun.run.x.status", "jetrun.finish.hook",
			"$JS.API.STREAM.DELETE.JETRUN_EVENTS", "$JS.API.STREAM.PURGE.JETRUN_EVENTS",
			"$JS.API.STREAM.CREATE.JETRUN_X", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.x",
		},
		"child": {
			"jetrun.dispatch.demo", "jetrun.finish.hook", "jetrun.dlq.finish.hook", "jetrun.signal.x.go",
			"$JS.API.STREAM.DELETE.JETRUN_DISPATCH", "$JS.API.STREAM.PURGE.JETRUN_EVENTS",
			"$JS.API.STREAM.PURGE.KV_jetrun_runs", "$JS.API.STREAM.UPDATE.JETRUN_EVENTS",
			"$JS.API.STREAM.MSG.DELETE.JETRUN_DISPATCH",
			"$JS.API.CONSUMER.CREATE.JETRUN_FINISH.x.jetrun.finish.hook", "$JS.API.CONSUMER.DURABLE.CREATE.JETRUN_FINISH.x",
			"$JS.API.CONSUMER.MSG.NEXT.JETRUN_FINISH.finish-hook", "$JS.API.CONSUMER.CREATE.JETRUN_DLQ.x",
			"$JS.API.DIRECT.GET.JETRUN_FINISH", "$JS.API.DIRECT.GET.JETRUN_DLQ.jetrun.dlq.demo",
			"$JS.API.STREAM.MSG.GET.JETRUN_FINISH", "$JS.API.STREAM.MSG.GET.JETRUN_DLQ",
		},
		"viewer": {
			"jetrun.dispatch.demo", "jetrun.signal.x.go", "jetrun.run.x.status", "jetrun.finish.hook", "jetrun.obs.x",
			"$KV.jetrun_runs.x", "$JS.API.STREAM.DELETE.JETRUN_EVENTS", "$JS.API.STREAM.PURGE.JETRUN_EVENTS",
			"$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.x", "$JS.ACK.JETRUN_DISPATCH.x",
		},
		"parent": {
			"$JS.API.STREAM.DELETE.JETRUN_EVENTS", "$JS.API.STREAM.DELETE.KV_jetrun_runs",
			"$JS.API.STREAM.PURGE.JETRUN_FINISH", "$JS.API.STREAM.PURGE.JETRUN_DISPATCH",
			"$JS.API.STREAM.PURGE.KV_jetrun_runs",
		},
		"child-nesting": {"jetrun.finish.hook", "$JS.API.STREAM.DELETE.JETRUN_DISPATCH"},
	}
	for user, subjects := range cannot {
		for _, s := range subjects {
			refused(t, url, user, s)
		}
	}

	// A refused JetStream call fails, it does not succeed quietly; the
	// streams are all still there.
	nc, err := roleConn(url, "child", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, "JETRUN_EVENTS"); err == nil {
		t.Fatal("child deleted JETRUN_EVENTS")
	}
	if _, err := js.Publish(ctx, "jetrun.dispatch.demo", []byte(`{"input":1}`)); err == nil {
		t.Fatal("child published a dispatch")
	}
	pnc, err := roleConn(url, "parent", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pnc.Close()
	pjs, _ := jetstream.New(pnc)
	for _, s := range []string{"JETRUN_DISPATCH", "JETRUN_EVENTS", "JETRUN_FINISH", "JETRUN_DLQ", "JETRUN_SIGNALS", "KV_jetrun_runs"} {
		if _, err := pjs.Stream(context.Background(), s); err != nil {
			t.Errorf("stream %s: %v", s, err)
		}
	}

	// What the roles may do beyond the lifecycle test: a child whose agents
	// nest may dispatch; a producer may signal.
	for user, subject := range map[string]string{"child-nesting": "jetrun.dispatch.nest-probe", "producer": "jetrun.signal.x.go"} {
		c, err := roleConn(url, user, nil)
		if err != nil {
			t.Fatal(err)
		}
		cjs, _ := jetstream.New(c)
		pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := cjs.Publish(pctx, subject, []byte(`{"input":1}`)); err != nil {
			t.Errorf("%s: publish %s: %v", user, subject, err)
		}
		pcancel()
		c.Close()
	}
}

// A child-worker started as child before any parent-worker created the
// streams fails at start with an error that says why, instead of hanging.
func TestRolesChildWithoutStreamsSaysWhy(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	child := start(t, "child-worker", roleEnv(url, "child"))
	if err := child.wait(60 * time.Second); err == nil {
		t.Fatal("child-worker started without streams it may not create")
	}
	all := child.stderr.String()
	if !strings.Contains(all, "start a parent-worker first") || !strings.Contains(all, "permissions violation") {
		t.Fatalf("child-worker did not say why it stopped:\n%s", all)
	}
}

func mergeAll(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// A child-worker whose agents dispatch nested runs logs in as
// child-nesting (the child's permissions plus dispatches): its nested demo
// run, served by a plain child, completes; a plain child may not dispatch
// (TestRolesRefuseWhatTheyMayNotDo).
func TestRolesChildNestingDispatchesNestedRuns(t *testing.T) {
	t.Parallel()
	url := roleServer(t)
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	start(t, "child-worker", roleEnv(url, "child")).waitLog("child-worker serving", 60*time.Second)
	nestURL := strings.Replace(url, "nats://", "nats://child-nesting:"+rolePasswords["child-nesting"]+"@", 1)
	nest := start(t, "nestworker", nil, nestURL, "nest-roles")
	nest.waitLog("nestworker serving", 60*time.Second)

	if out, err := natsAs(t, url, "producer", 20*time.Second, "pub", "jetrun.dispatch.nester",
		`{"runId":"roles-nest","input":{"steps":2,"stepMs":10}}`); err != nil {
		t.Fatalf("producer: nats pub: %v\n%s", err, out)
	}
	natstest.Eventually(t, 60*time.Second, func() bool {
		out, err := natsAs(t, url, "viewer", 10*time.Second, "kv", "get", "jetrun_runs", "roles-nest", "--raw")
		return err == nil && strings.Contains(out, `"status":"completed"`) && strings.Contains(out, "child: finished 2 steps")
	}, "the nesting run did not complete")
	for _, l := range strings.Split(nest.stderr.String(), "\n") {
		// It may not create dispatch consumers: a parent-worker creates
		// those of the agent types it announces.
		if strings.Contains(strings.ToLower(l), "permissions violation") && !strings.Contains(l, "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.") {
			t.Fatalf("child-nesting was refused something:\n%s", nest.stderr)
		}
	}
}

// The nats commands of the production checklist's credentials item run as
// shown against the shipped nats.conf and a parent-worker as parent: the
// allowed ones succeed, the refused ones (`! nats ...`) fail.
func TestRolesChecklistCommands(t *testing.T) {
	t.Parallel()
	cmds := checklistCommands(t, "nats ")
	url := roleServer(t)
	pw := start(t, "parent-worker", mergeAll(roleEnv(url, "parent"), map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)
	nats := natsCLI(t)
	for _, c := range cmds {
		c = strings.Replace(c, "nats ", "exec "+nats+" --timeout 2s ", 1)
		if strings.HasPrefix(c, "! ") {
			c = "! sh -c " + shellQuote(strings.TrimPrefix(c, "! "))
		}
		cmd := exec.Command("sh", "-c", c)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NATS_URL=" + url}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s\n%v\n%s", c, err, out)
		}
		if strings.HasPrefix(c, "! ") && !strings.Contains(string(out), "Permissions Violation") {
			t.Fatalf("%s failed, but not for a permissions violation:\n%s", c, out)
		}
		t.Logf("%s\n%s", c, out)
	}
	// The refused ones changed nothing.
	nc, err := roleConn(url, "parent", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, s := range []string{"JETRUN_EVENTS", "JETRUN_FINISH"} {
		if _, err := js.Stream(context.Background(), s); err != nil {
			t.Errorf("stream %s: %v", s, err)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// The four lines of docs/operations.md that run every process as its role
// work as shown against the shipped nats.conf (only the server's address
// is the test's): the producer's dispatch, without a run id, runs on the
// child-worker and the viewer's watch sees it complete.
func TestRolesRecipeLinesRunADispatch(t *testing.T) {
	t.Parallel()
	text := operations(t)
	from := strings.Index(text, "Run every process as its role:")
	if from < 0 {
		t.Fatal("docs/operations.md has no role recipe")
	}
	var lines []string
	for _, l := range strings.Split(text[from:], "\n")[1:] {
		if l == "" && len(lines) > 0 {
			break
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("the role recipe has %d lines, want 4: %q", len(lines), lines)
	}
	url := roleServer(t)
	// A line "K=V ... ./bin/<binary>": its variables, then the binary.
	process := func(l string) (string, map[string]string) {
		env := map[string]string{"JETRUN_NATS_URL": url, "JETRUN_HTTP_ADDR": ""}
		fields := strings.Fields(l)
		for _, f := range fields[:len(fields)-1] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				t.Fatalf("%q: %q is not a setting", l, f)
			}
			env[k] = v
		}
		return filepath.Base(fields[len(fields)-1]), env
	}
	name, env := process(lines[0])
	start(t, name, env).waitLog("parent-worker ready", 60*time.Second)
	name, env = process(lines[1])
	start(t, name, env).waitLog("child-worker serving", 60*time.Second)

	nats := natsCLI(t)
	shell := func(l string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", "exec "+strings.Replace(l, "nats ", nats+" --server "+url+" ", 1))
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		return cmd
	}
	watch := shell(lines[3])
	watchOut := &syncBuffer{}
	watch.Stdout, watch.Stderr = watchOut, watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Process.Kill(); _ = watch.Wait() }()
	if out, err := shell(lines[2]).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", lines[2], err, out)
	}
	natstest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(watchOut.String(), `"status":"completed"`) },
		"%s never showed the run completed:\n%s", lines[3], watchOut)
}
