package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/config"
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

func TestRedactedNeverShowsSecrets(t *testing.T) {
	n := config.NATS{URL: "nats://h:4222", User: "u", Password: "hunter2", Token: "s3cret"}
	if s := n.Redacted(); strings.Contains(s, "hunter2") || strings.Contains(s, "s3cret") {
		t.Fatalf("redacted = %q", s)
	}
}
