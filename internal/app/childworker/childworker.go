// Package childworker is the child-worker binary: a child fleet process
// serving built-in agent types until its context ends, then shutting down
// gracefully.
package childworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/app/metrics"
	"github.com/jetrun/jetrun/internal/app/natsconn"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// Run serves until ctx is done. Then it stops pulling, lets runs in flight
// finish for up to cfg.ShutdownTimeout and hands the rest back; once abort
// is done too, it hands them back at once.
func Run(ctx, abort context.Context, cfg config.ChildWorker, logger *slog.Logger) error {
	nc, err := natsconn.Connect(cfg.NATS, "jetrun child-worker", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	conf, err := cfg.Configured()
	if err != nil {
		return err
	}
	rt, err := jetrun.Open(ctx, nc, cfg.Streams.Runtime())
	if err != nil {
		return err
	}
	wcfg := cfg.Pool.WorkerConfig(logger)
	var (
		m  *metrics.Metrics
		ln net.Listener
	)
	if cfg.MetricsAddr != "" {
		if ln, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics: listen on %s: %w", cfg.MetricsAddr, err)
		}
		defer ln.Close()
		m = metrics.New()
		wcfg.Observer = m
	}
	// The worker runs until the graceful shutdown below, not until ctx (the
	// signal) ends, which would hand its runs back at once.
	w, err := agents.StartPool(context.WithoutCancel(ctx), rt, wcfg, cfg.AgentTypes, conf)
	if err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	var srv *http.Server
	if m != nil {
		m.WorkerAgentTypes(w.AgentTypes()...)
		m.WatchLag(engine.From(rt).JetStream(), wire.Namespace(rt.Namespace()), w.AgentTypes(), 0)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { serveErr <- srv.Serve(ln) }()
		logger.Info("metrics served", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	logger.Info("child-worker serving", "nats", nc.ConnectedUrlRedacted(), "agent_types", w.AgentTypes(), "worker", w.ID())
	var errs []error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		errs = append(errs, fmt.Errorf("metrics: %w", err))
	}
	logger.Info("shutting down: waiting for runs in flight to finish, then handing the rest back",
		"runs_in_flight", w.InFlight(), "timeout", cfg.ShutdownTimeout)
	if srv != nil {
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(hctx); err != nil {
			errs = append(errs, fmt.Errorf("metrics: %w", err))
		}
		cancel()
	}
	sctx, cancel := context.WithTimeout(abort, cfg.ShutdownTimeout)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		return errors.Join(append(errs, fmt.Errorf("shutdown: %w", err))...)
	}
	if abort.Err() != nil {
		logger.Info("child-worker stopped at once: runs in flight handed back")
		return errors.Join(errs...)
	}
	if err := nc.Drain(); err != nil {
		logger.Warn("drain nats connection", "err", err)
	}
	logger.Info("child-worker stopped")
	return errors.Join(errs...)
}
