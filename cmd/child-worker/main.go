// Command child-worker is a jetrun child fleet process: it pulls dispatches
// for the agent types it serves, runs them, and streams their events. Run as
// many as you like; they share the work. Settings come from JETRUN_*
// environment variables: child-worker --help lists them.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/jetrun/jetrun/internal/app/childworker"
	"github.com/jetrun/jetrun/internal/app/cli"
	"github.com/jetrun/jetrun/internal/app/config"
)

func main() {
	var cfg config.ChildWorker
	os.Exit(cli.Main("child-worker", "runs jetrun child runs of the configured agent types", os.Args[1:], &cfg,
		func(ctx, abort context.Context, logger *slog.Logger) error {
			return childworker.Run(ctx, abort, cfg, logger)
		}))
}
