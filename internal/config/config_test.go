package config_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/config"
	"github.com/jetrun/jetrun/internal/embedded"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/reconcile"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	clearEnv(t)
	t.Setenv("JETRUN_CONCURRENCY", "0")
	t.Setenv("JETRUN_LEASE", "10ms")
	t.Setenv("JETRUN_PREFIX", "a.b")
	t.Setenv("JETRUN_LOG_LEVEL", "loud")
	var cfg config.ChildWorker
	err := config.Load(&cfg)
	if err == nil {
		t.Fatal("bad settings accepted")
	}
	for _, want := range []string{"JETRUN_CONCURRENCY", "JETRUN_LEASE", "JETRUN_PREFIX", "log level"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// clearEnv hides the JETRUN_* variables of the environment the tests run in.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "JETRUN_") {
			t.Setenv(k, v) // restores it after the test
			os.Unsetenv(k)
		}
	}
}

func TestDefaults(t *testing.T) {
	clearEnv(t)
	var cfg config.ChildWorker
	if err := config.Load(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.URL != config.DefaultChildNATSURL || cfg.Concurrency != 16 || len(cfg.AgentTypes) != 1 || cfg.AgentTypes[0] != "demo" {
		t.Fatalf("defaults: %+v", cfg)
	}
	var pw config.ParentWorker
	if err := config.Load(&pw); err != nil {
		t.Fatal(err)
	}
	if pw.URL != "" || pw.HTTPAddr != "127.0.0.1:8080" || pw.EmbeddedPort != 4222 {
		t.Fatalf("parent defaults: %+v", pw)
	}
}

// The environment's defaults are the packages' own: a binary configured by
// nothing behaves like the Go API configured by nothing.
func TestDefaultsMatchThePackages(t *testing.T) {
	clearEnv(t)
	var pw config.ParentWorker
	if err := config.Load(&pw); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ got, want any }{
		"JETRUN_REPLICAS":                    {pw.Replicas, events.DefaultReplicas},
		"JETRUN_DEDUP_WINDOW":                {pw.DedupWindow, events.DefaultDedupWindow},
		"JETRUN_EVENTS_MAX_AGE":              {pw.EventsMaxAge, events.DefaultEventsMaxAge},
		"JETRUN_DLQ_MAX_AGE":                 {pw.DLQMaxAge, events.DefaultDLQMaxAge},
		"JETRUN_CONCURRENCY":                 {pw.Concurrency, worker.DefaultConcurrency},
		"JETRUN_FLEET_CONCURRENCY":           {pw.FleetConcurrency, worker.DefaultFleetConcurrency},
		"JETRUN_LEASE":                       {pw.Lease, worker.DefaultLease},
		"JETRUN_MAX_ATTEMPTS":                {pw.MaxAttempts, worker.DefaultMaxAttempts},
		"JETRUN_MAX_DEPTH":                   {pw.MaxDepth, events.DefaultMaxDepth},
		"JETRUN_RECONCILE_INTERVAL":          {pw.ReconcileInterval, reconcile.DefaultInterval},
		"JETRUN_RETENTION":                   {pw.Retention, reconcile.DefaultRetention},
		"JETRUN_DETACHED_MAX_BUDGET":         {pw.DetachedMaxBudget, reconcile.DefaultMaxBudget},
		"JETRUN_DETACHED_NO_PROGRESS_BUDGET": {pw.DetachedNoProgress, reconcile.DefaultNoProgressBudget},
		"JETRUN_MAX_REDISPATCHES":            {pw.MaxRedispatches, reconcile.DefaultMaxRedispatches},
		"JETRUN_FINISH_MAX_ATTEMPTS":         {pw.FinishMaxAttempts, finish.DefaultMaxAttempts},
		"JETRUN_FINISH_TIMEOUT":              {pw.FinishTimeout, finish.DefaultTimeout},
		"JETRUN_FINISH_RETRY_DELAY":          {pw.FinishRetryDelay, finish.DefaultRetryDelay},
		"JETRUN_EMBEDDED_PORT":               {pw.EmbeddedPort, embedded.DefaultPort},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s defaults to %v; the package's default is %v", name, c.got, c.want)
		}
	}
	if want := fmt.Sprintf("nats://127.0.0.1:%d", embedded.DefaultPort); config.DefaultChildNATSURL != want {
		t.Errorf("child-workers connect to %s by default, not to the embedded server at %s", config.DefaultChildNATSURL, want)
	}
}

func TestRedactedNeverShowsSecrets(t *testing.T) {
	n := config.NATS{URL: "nats://h:4222", User: "u", Password: "hunter2", Token: "s3cret"}
	if s := n.Redacted(); strings.Contains(s, "hunter2") || strings.Contains(s, "s3cret") {
		t.Fatalf("redacted = %q", s)
	}
}

func TestConfiguredAgents(t *testing.T) {
	clearEnv(t)
	t.Setenv("JETRUN_HTTP_AGENTS", "summarize=http://127.0.0.1:9000/run,translate=https://x.example/t")
	t.Setenv("JETRUN_HTTP_AGENT_TOKENS", "summarize=secret")
	t.Setenv("JETRUN_EXEC_AGENTS", "shout=/bin/sh -c cat")
	var cfg config.ChildWorker
	if err := config.Load(&cfg); err != nil {
		t.Fatal(err)
	}
	conf, err := cfg.Configured()
	if err != nil {
		t.Fatal(err)
	}
	if conf.HTTP["summarize"].Token != "secret" || conf.HTTP["translate"].Token != "" ||
		conf.Exec["shout"].Path != "/bin/sh" || strings.Join(conf.Exec["shout"].Args, " ") != "-c cat" {
		t.Fatalf("configured: %+v", conf)
	}
	if len(cfg.AgentTypes) != 0 {
		t.Fatalf("agent types %v: demo is the default only without configured agents", cfg.AgentTypes)
	}

	t.Setenv("JETRUN_HTTP_AGENTS", "demo=http://x/run,bad.name=http://x,ftp=ftp://x,nourl")
	t.Setenv("JETRUN_HTTP_AGENT_TOKENS", "other=secret")
	t.Setenv("JETRUN_EXEC_AGENTS", "gone=/no/such/command,ftp=/bin/sh")
	err = config.Load(&cfg)
	if err == nil {
		t.Fatal("bad agents accepted")
	}
	for _, want := range []string{"demo", "bad.name", `"ftp://x" is not an http(s) URL`, `"nourl" is not name=url`,
		"other is not an http agent type", "/no/such/command", "ftp is defined twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows a token", err)
	}
}
