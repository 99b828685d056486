package config_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/app/embedded"
	"github.com/jetrun/jetrun/internal/app/localurl"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/parent"
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

// With no JETRUN_NATS_URL, child-worker and the CLI connect to the server
// the local parent-worker recorded in the data directory (its embedded
// server may be off the default port); a set URL wins.
func TestLocalServerURLFromTheDataDirectory(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	t.Setenv("JETRUN_DATA_DIR", dir)
	const url = "nats://127.0.0.1:40123"
	if err := localurl.Write(dir, url); err != nil {
		t.Fatal(err)
	}
	var child config.ChildWorker
	var cli config.CLI
	if err := errors.Join(config.Load(&child), config.Load(&cli)); err != nil {
		t.Fatal(err)
	}
	if child.URL != url || cli.URL != url || child.URLFile() != localurl.Path(dir) {
		t.Fatalf("child-worker connects to %s (from %q), the CLI to %s; want %s", child.URL, child.URLFile(), cli.URL, url)
	}
	t.Setenv("JETRUN_NATS_URL", "nats://example.test:4222")
	child = config.ChildWorker{}
	if err := config.Load(&child); err != nil || child.URL != "nats://example.test:4222" || child.URLFile() != "" {
		t.Fatalf("JETRUN_NATS_URL set: %s (from %q) %v", child.URL, child.URLFile(), err)
	}
}

// The environment's defaults are the packages' own: a binary configured by
// nothing behaves like the Go API configured by nothing. Retention is the
// exception: its zero keeps runs forever in both, so the Go API's default
// is zero and JETRUN_RETENTION defaults to the recommended
// reconcile.DefaultRetention.
func TestDefaultsMatchThePackages(t *testing.T) {
	clearEnv(t)
	var pw config.ParentWorker
	if err := config.Load(&pw); err != nil {
		t.Fatal(err)
	}
	checked := map[string]struct{ got, want any }{
		"JETRUN_PREFIX":                      {pw.Prefix, events.DefaultPrefix},
		"JETRUN_FINISH_MAX_AGE":              {pw.FinishMaxAge, events.DefaultFinishMaxAge},
		"JETRUN_REATTACH_NO_PROGRESS":        {pw.ReattachNoProgress, parent.DefaultReattachNoProgress},
		"JETRUN_FINISH_UNSERVED_WAIT":        {pw.FinishUnservedWait, reconcile.DefaultFinishUnservedWait},
		"JETRUN_DISPATCH_UNSERVED_WAIT":      {pw.DispatchUnservedWait, reconcile.DefaultDispatchUnservedWait},
		"JETRUN_HTTP_TIMEOUT":                {pw.HTTPTimeout, httpagent.DefaultTimeout},
		"JETRUN_HTTP_MAX_LINE":               {pw.HTTPMaxLine, httpagent.DefaultMaxLine},
		"JETRUN_EXEC_GRACE":                  {pw.ExecGrace, execagent.DefaultGrace},
		"JETRUN_EXEC_MAX_LINE":               {pw.ExecMaxLine, execagent.DefaultMaxLine},
		"JETRUN_REPLICAS":                    {pw.Replicas, events.DefaultReplicas},
		"JETRUN_DEDUP_WINDOW":                {pw.DedupWindow, events.DefaultDedupWindow},
		"JETRUN_EVENTS_DEDUP_WINDOW":         {pw.EventsDedupWindow, events.DefaultEventsDedupWindow},
		"JETRUN_EVENTS_MAX_AGE":              {pw.EventsMaxAge, events.DefaultEventsMaxAge},
		"JETRUN_EVENTS_STREAMS":              {pw.EventsStreams, 0},
		"JETRUN_DLQ_MAX_AGE":                 {pw.DLQMaxAge, events.DefaultDLQMaxAge},
		"JETRUN_CONCURRENCY":                 {pw.Concurrency, worker.DefaultConcurrency},
		"JETRUN_FLEET_CONCURRENCY":           {pw.FleetConcurrency, worker.DefaultFleetConcurrency},
		"JETRUN_LEASE":                       {pw.Lease, worker.DefaultLease},
		"JETRUN_MAX_ATTEMPTS":                {pw.MaxAttempts, worker.DefaultMaxAttempts},
		"JETRUN_MAX_DEPTH":                   {pw.MaxDepth, events.DefaultMaxDepth},
		"JETRUN_CHUNK_WINDOW":                {pw.ChunkWindow, worker.DefaultChunkWindow},
		"JETRUN_CLAIM_WINDOW":                {pw.ClaimWindow, worker.DefaultClaimWindow},
		"JETRUN_RECONCILE_INTERVAL":          {pw.ReconcileInterval, reconcile.DefaultInterval},
		"JETRUN_RETENTION":                   {pw.Retention, reconcile.DefaultRetention},
		"JETRUN_DETACHED_MAX_BUDGET":         {pw.DetachedMaxBudget, reconcile.DefaultMaxBudget},
		"JETRUN_DETACHED_NO_PROGRESS_BUDGET": {pw.DetachedNoProgress, reconcile.DefaultNoProgressBudget},
		"JETRUN_MAX_REDISPATCHES":            {pw.MaxRedispatches, reconcile.DefaultMaxRedispatches},
		"JETRUN_FINISH_MAX_ATTEMPTS":         {pw.FinishMaxAttempts, finish.DefaultMaxAttempts},
		"JETRUN_FINISH_TIMEOUT":              {pw.FinishTimeout, finish.DefaultTimeout},
		"JETRUN_FINISH_RETRY_DELAY":          {pw.FinishRetryDelay, finish.DefaultRetryDelay},
		"JETRUN_EMBEDDED_PORT":               {pw.EmbeddedPort, embedded.DefaultPort},
	}
	for name, c := range checked {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s defaults to %v; the package's default is %v", name, c.got, c.want)
		}
	}
	// Settings of the binaries alone: no package has a default for them.
	binaryOnly := []string{"JETRUN_LOG_FORMAT", "JETRUN_LOG_LEVEL", "JETRUN_SHUTDOWN_TIMEOUT", "JETRUN_REATTACH_MAX_WINDOW",
		"JETRUN_METER", "JETRUN_DATA_DIR", "JETRUN_EMBEDDED_HOST", "JETRUN_EMBEDDED_MAX_MEMORY", "JETRUN_EMBEDDED_MAX_STORE",
		"JETRUN_SYNC_ALWAYS", "JETRUN_HTTP_ADDR", "JETRUN_DEMO_RUNS"}
	// Every variable with a default is checked above or is the binaries' own:
	// a new default needs its package constant (or a place in binaryOnly).
	for _, spec := range []any{config.ParentWorker{}, config.ChildWorker{}, config.CLI{}} {
		for _, name := range defaulted(reflect.TypeOf(spec)) {
			if _, ok := checked[name]; !ok && !slices.Contains(binaryOnly, name) {
				t.Errorf("%s has a default that no package constant checks", name)
			}
		}
	}
	if want := fmt.Sprintf("nats://127.0.0.1:%d", embedded.DefaultPort); config.DefaultChildNATSURL != want {
		t.Errorf("child-workers connect to %s by default, not to the embedded server at %s", config.DefaultChildNATSURL, want)
	}
}

// defaulted returns the variables of a config struct that have a default tag.
func defaulted(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Anonymous {
			out = append(out, defaulted(f.Type)...)
			continue
		}
		if _, ok := f.Tag.Lookup("default"); ok {
			out = append(out, envName(f))
		}
	}
	return out
}

// Validate checks and changes nothing: the defaults that depend on other
// settings are Load's (ApplyDefaults), not Validate's.
func TestValidateIsPure(t *testing.T) {
	var child config.ChildWorker
	child.Concurrency, child.FleetConcurrency, child.Lease, child.MaxAttempts, child.MaxDepth = 1, 1, worker.MinLease, 1, 1
	before := fmt.Sprintf("%+v", child)
	_ = child.Validate()
	if after := fmt.Sprintf("%+v", child); after != before {
		t.Fatalf("Validate changed the config:\n%s\n%s", before, after)
	}
	child.ApplyDefaults()
	if child.URL != config.DefaultChildNATSURL || len(child.AgentTypes) != 1 || child.AgentTypes[0] != "demo" {
		t.Fatalf("after ApplyDefaults: %+v", child)
	}
	var cli config.CLI
	_ = cli.Validate()
	if cli.URL != "" {
		t.Fatalf("Validate set the CLI's URL: %q", cli.URL)
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

// Only JETRUN_* variables are read: envconfig would fall back to a field's
// tag without the prefix (NATS_URL, LEASE, CONCURRENCY, ...), and NATS_URL
// is the nats CLI's own variable, which the README tour has users export.
// Every variable set without its prefix leaves the configuration at its
// defaults.
func TestUnprefixedVariablesAreIgnored(t *testing.T) {
	clearEnv(t)
	for _, spec := range []any{&config.ParentWorker{}, &config.ChildWorker{}, &config.CLI{}} {
		if err := config.Load(spec.(interface{ Validate() error })); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%+v", spec)
		for _, name := range variables(reflect.TypeOf(spec).Elem()) {
			bare, ok := strings.CutPrefix(name, config.Prefix+"_")
			if !ok {
				t.Errorf("%T reads %s, which lacks the %s_ prefix", spec, name, config.Prefix)
				continue
			}
			t.Setenv(bare, "nats://127.0.0.1:1") // not a valid value of most settings: reading it fails Load
		}
		t.Setenv("LEASE", "1h")
		t.Setenv("CONCURRENCY", "3")
		fresh := reflect.New(reflect.TypeOf(spec).Elem()).Interface()
		if err := config.Load(fresh.(interface{ Validate() error })); err != nil {
			t.Fatalf("%T: unprefixed variables were read: %v", spec, err)
		}
		if got := fmt.Sprintf("%+v", fresh); got != want {
			t.Fatalf("%T: unprefixed variables were read:\n got %s\nwant %s", spec, got, want)
		}
	}
}

// variables returns the environment variables of a config struct.
func variables(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		switch {
		case f.Anonymous:
			out = append(out, variables(f.Type)...)
		case f.IsExported(): // envconfig reads exported fields only
			out = append(out, envName(f))
		}
	}
	return out
}

// envName is the variable of a config field.
func envName(f reflect.StructField) string { return f.Tag.Get("envconfig") }
