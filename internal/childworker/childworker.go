// Package childworker is the child-worker binary: a child fleet process
// serving built-in agent types until its context ends, then shutting down
// gracefully.
package childworker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jetrun/jetrun/internal/agents"
	"github.com/jetrun/jetrun/internal/config"
	"github.com/jetrun/jetrun/internal/natsconn"
)

// Run serves until ctx is done. Then it stops pulling, lets runs in flight
// finish for up to cfg.ShutdownTimeout and hands the rest back.
func Run(ctx context.Context, cfg config.ChildWorker, logger *slog.Logger) error {
	nc, err := natsconn.Connect(cfg.NATS, "jetrun child-worker", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	conf, err := cfg.Configured()
	if err != nil {
		return err
	}
	w, err := agents.StartPool(ctx, nc, cfg.Pool.WorkerConfig(cfg.Streams, logger), cfg.AgentTypes, conf)
	if err != nil {
		return err
	}
	logger.Info("child-worker serving", "nats", nc.ConnectedUrlRedacted(), "agent_types", w.AgentTypes(), "worker", w.ID())
	<-ctx.Done()
	logger.Info("shutting down: finishing runs in flight", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := nc.Drain(); err != nil {
		logger.Warn("drain nats connection", "err", err)
	}
	logger.Info("child-worker stopped")
	return nil
}
