// Command jetrun dispatches, watches and steers jetrun runs from a terminal:
// dispatch (with --wait, a live progress bar), get, ls, replay, cancel,
// signal and clear; jetrun mcp serves the agent types as MCP tools on
// stdio. It reads the same JETRUN_* variables as the workers; jetrun --help
// lists them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jetrun/jetrun/internal/app/jetruncli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := jetruncli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
