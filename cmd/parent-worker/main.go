// Command parent-worker serves jetrun's HTTP API over the parent API and can
// host an in-process child pool. With no JETRUN_NATS_URL it starts an
// embedded nats-server with JetStream and prints its URL for the nats CLI.
// Settings come from JETRUN_* environment variables: parent-worker --help
// lists them.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/jetrun/jetrun/internal/app/cli"
	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/app/parentworker"
)

func main() {
	var cfg config.ParentWorker
	os.Exit(cli.Main("parent-worker", "the jetrun HTTP API, optional in-process child pool and embedded nats-server", os.Args[1:], &cfg,
		func(ctx, abort context.Context, logger *slog.Logger) error {
			return parentworker.Run(ctx, abort, cfg, logger, os.Stdout)
		}))
}
