package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/config"
)

// JETRUN_AGENT_SCHEMAS_DIR describes http and exec agent types; files that
// name no such type or hold a schema that does not compile are reported
// together.
func TestAgentSchemasDir(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("summarize.json", `{"description":"Summarizes a topic.","inputSchema":{"type":"object","required":["topic"]},"outputSchema":{"type":"object"}}`)
	t.Setenv("JETRUN_HTTP_AGENTS", "summarize=http://127.0.0.1:9/run")
	t.Setenv("JETRUN_AGENT_SCHEMAS_DIR", dir)
	var cfg config.ChildWorker
	if err := config.Load(&cfg); err != nil {
		t.Fatal(err)
	}
	conf, err := cfg.Configured()
	if err != nil {
		t.Fatal(err)
	}
	if info := conf.Info["summarize"]; info.Description != "Summarizes a topic." || !strings.Contains(string(info.InputSchema), "topic") {
		t.Fatalf("info: %+v", conf.Info)
	}

	write("ghost.json", `{"description":"nobody"}`)
	write("summarize.json", `{"inputSchema":{"type":12}}`)
	_, err = cfg.Configured()
	if err == nil || !strings.Contains(err.Error(), "ghost.json names no http or exec agent type") ||
		!strings.Contains(err.Error(), "summarize.json: input schema") {
		t.Fatalf("bad schema dir: %v", err)
	}
}
