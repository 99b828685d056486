package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// The README's stdio MCP entry works as pasted: the command it shows prints
// a host config whose server, launched the way a host launches it (by the
// printed command, with the printed environment, from another directory,
// without bin/ on PATH), lists the demo tool of a parent-worker started
// like make run's (embedded server on a port nobody chose) and calls it.
func TestReadmeMCPStdioConfigWorksAsPasted(t *testing.T) {
	t.Parallel()
	cmds := readmeCommands(t, "### MCP: every agent type a tool", "- `tools/list` is the agent registry", "make ", 1)
	dataDir := t.TempDir()
	pw := start(t, "parent-worker", map[string]string{
		"JETRUN_CHILDREN": "demo", "JETRUN_HTTP_ADDR": "127.0.0.1:0", "JETRUN_EMBEDDED_PORT": "-1", "JETRUN_DATA_DIR": dataDir,
	})
	pw.waitLog("parent-worker ready", 60*time.Second)

	// The command as the README shows it, in the checkout; the data
	// directory is the test's instead of ./data.
	c := cmds[0]
	cmd := exec.Command("sh", "-c", "exec "+c)
	cmd.Dir = repoRoot(t)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETRUN_") && !strings.HasPrefix(kv, "MAKE") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "JETRUN_DATA_DIR="+dataDir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", c, err, out)
	}
	var config struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(out, &config); err != nil || len(config.MCPServers) != 1 {
		t.Fatalf("%s printed no host config with one server (%v):\n%s", c, err, out)
	}
	for name, s := range config.MCPServers {
		if !filepath.IsAbs(s.Command) {
			t.Fatalf("server %s: command %q is not an absolute path: a host without bin/ on its PATH cannot spawn it", name, s.Command)
		}
		host := exec.Command(s.Command, s.Args...)
		host.Dir = t.TempDir()
		host.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
		for k, v := range s.Env {
			host.Env = append(host.Env, k+"="+v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cs := mcpConnect(t, ctx, &mcp.CommandTransport{Command: host}, nil)
		natstest.Eventually(t, 30*time.Second, func() bool {
			res, err := cs.ListTools(ctx, nil)
			return err == nil && len(res.Tools) == 1 && res.Tools[0].Name == "demo"
		}, "server %s does not list the demo tool", name)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo", Arguments: map[string]int{"steps": 2, "stepMs": 1}})
		if err != nil || res.IsError {
			t.Fatalf("server %s: tools/call demo: %+v %v", name, res, err)
		}
	}
}
