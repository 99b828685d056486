// Package parentworker is the parent-worker binary: the HTTP API over the
// parent API, an optional in-process child pool, and, when no NATS URL is
// configured, an embedded nats-server with JetStream.
package parentworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/app/embedded"
	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/localurl"
	"github.com/jetrun/jetrun/internal/app/mcpserver"
	"github.com/jetrun/jetrun/internal/app/metrics"
	"github.com/jetrun/jetrun/internal/app/natsconn"
	"github.com/jetrun/jetrun/internal/app/runview"
	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/reconcile"
	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// httpShutdownTimeout bounds how long open HTTP requests may finish.
const httpShutdownTimeout = 5 * time.Second

// Run serves until ctx is done, then shuts down in reverse order: HTTP,
// child pool (graceful, see config.Pool.ShutdownTimeout), finish deliverer,
// meter, reconciler, NATS connection, embedded server. Once abort is done
// too, every step stops waiting (the pool hands its runs back at once) and
// the embedded server is shut down cleanly, so its store needs no recovery
// at the next start. The banner (where to look) goes to out.
func Run(ctx, abort context.Context, cfg config.ParentWorker, logger *slog.Logger, out io.Writer) error {
	natsCfg := cfg.NATS
	var extra []nats.Option
	var ns *server.Server
	if natsCfg.URL == "" {
		var err error
		ns, err = embedded.Start(embedded.Config{
			StoreDir: cfg.DataDir, Host: cfg.EmbeddedHost, Port: cfg.EmbeddedPort,
			MaxMemory: cfg.EmbeddedMaxMem, MaxStore: cfg.EmbeddedMaxFS, SyncAlways: cfg.SyncAlways, Logger: logger,
		})
		if err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
			logger.Info("embedded nats-server stopped")
		}()
		natsCfg.URL = ns.ClientURL()
		extra = append(extra, nats.InProcessServer(ns)) // this process's own components skip the socket
		// child-worker and jetrun find the server through this file when
		// it is not on the default port (see localurl).
		if err := localurl.Write(cfg.DataDir, natsCfg.URL); err != nil {
			return err
		}
		defer func() {
			if err := localurl.Remove(cfg.DataDir, ns.ClientURL()); err != nil {
				logger.Warn("remove the nats-url file", "err", err)
			}
		}()
	}
	nc, err := natsconn.Connect(natsCfg, "jetrun parent-worker", logger, extra...)
	if err != nil {
		return err
	}
	defer nc.Close()
	// Log records that are events (reconcile.begin, finish.delivered, …)
	// are also published on jetrun.obs.<event>.
	logger = slog.New(obs.NewHandler(logger.Handler(), nc, wire.Namespace(cfg.Namespace()), "parent-worker"))

	// One runtime for every role of the process: it creates (or checks)
	// the streams and buckets.
	rt, err := jetrun.Open(ctx, nc, cfg.Streams.Runtime())
	if err != nil {
		return err
	}
	pcfg := cfg.Reattach.ParentConfig(logger)
	pcfg.MaxDepth = cfg.MaxDepth
	client, err := parent.New(rt, pcfg)
	if err != nil {
		return err
	}
	m := metrics.New()
	js := engine.From(rt).JetStream()
	m.WatchLag(js, wire.Namespace(cfg.Namespace()), nil, 0)
	// The agent registry's bucket: parent-worker creates every stream and
	// bucket, so child-workers need no permission to create any (nats.conf).
	reg, err := registry.Open(ctx, js, wire.Namespace(cfg.Namespace()), cfg.Options().Replicas)
	if err != nil {
		return err
	}
	// Buckets an earlier jetrun created allowed roll-ups (one message with
	// Nats-Rollup: all from any role that writes a key erased the bucket):
	// refuse them from now on.
	hardened, err := engine.From(rt).Store().Harden(ctx)
	if err != nil {
		return err
	}
	if ok, err := bucket.Harden(ctx, js, wire.Namespace(cfg.Namespace()).AgentsBucket()); err != nil {
		return err
	} else if ok {
		hardened = append(hardened, wire.Namespace(cfg.Namespace()).AgentsBucket())
	}
	for _, b := range hardened {
		logger.Warn("bucket migrated: roll-ups refused from now on", "bucket", b)
	}

	rec, err := reconcile.New(engine.From(rt), reconcile.Config{
		ID:                   cfg.WorkerID,
		Interval:             cfg.ReconcileInterval,
		MaxBudget:            cfg.DetachedMaxBudget,
		NoProgressBudget:     cfg.DetachedNoProgress,
		MaxRedispatches:      cfg.MaxRedispatches,
		FinishUnservedWait:   cfg.FinishUnservedWait,
		DispatchUnservedWait: cfg.DispatchUnservedWait,
		Retention:            cfg.Retention, // 0 keeps runs forever, here as in the env
		MaxDepth:             cfg.MaxDepth,
		Logger:               logger,
		Observer:             m,
	})
	if err != nil {
		return err
	}
	// The services run until the shutdown below stops them in order, not
	// until ctx (the signal) ends, which would stop them at once.
	life := context.WithoutCancel(ctx)
	if err := rec.Start(life); err != nil {
		return err
	}
	defer func() { _ = rec.Stop() }() // idempotent; the normal path stops it below

	deliverer, err := finish.New(rt, finish.Config{
		ID:          cfg.WorkerID,
		MaxAttempts: cfg.FinishMaxAttempts,
		Timeout:     cfg.FinishTimeout,
		RetryDelay:  cfg.FinishRetryDelay,
		Logger:      logger,
		Observer:    m,
	})
	if err != nil {
		return err
	}
	hooks, err := cfg.Webhooks()
	if err != nil {
		return err
	}
	for name, url := range hooks {
		deliverer.Handle(name, finish.Webhook(url, nil))
		m.FinishHandlers(name)
	}
	if err := deliverer.Start(life); err != nil {
		return err
	}
	stopDeliverer := func() {
		dctx, cancel := context.WithTimeout(abort, cfg.FinishTimeout)
		defer cancel()
		_ = deliverer.Shutdown(dctx) // in-flight deliveries finish, or are retried later
	}
	defer stopDeliverer() // idempotent; the normal path stops it below

	stopMeter := func() {}
	if cfg.Meter {
		m, err := meter.New(rt, meter.Config{Logger: logger,
			OnStart: m.MeterStart, OnFinish: m.MeterFinish, Observer: m})
		if err != nil {
			return err
		}
		if err := m.Start(life); err != nil {
			return err
		}
		stopMeter = func() { _ = m.Stop() } // metering is at least once: events in flight are handed out again
		defer stopMeter()                   // idempotent; the normal path stops it below
	}

	var pool *worker.Worker
	conf, err := cfg.Configured()
	if err != nil {
		return err
	}
	if len(cfg.Children) > 0 || len(conf.Names()) > 0 {
		wcfg := cfg.Pool.WorkerConfig(logger)
		wcfg.Observer = m
		if pool, err = agents.StartPool(life, rt, wcfg, cfg.Children, conf); err != nil {
			return err
		}
		m.WorkerAgentTypes(pool.AgentTypes()...)
	}
	if cfg.Meter {
		meterAgentTypes(ctx, m, reg, pool, logger)
	}

	// The summary of every row, for the HTTP API, is also the guard of
	// final rows: a row seen leaving a final status (rewritten by a
	// credential that may write the runs bucket) is restored from the
	// run's final status event.
	view, err := runview.StartGuard(ctx, engine.From(rt).Store(), logger, func(ctx context.Context, id string) {
		ev, ok, err := engine.From(rt).RepairFinal(ctx, id)
		switch {
		case err != nil:
			logger.ErrorContext(ctx, "a final row was rewritten; repairing it failed", "run_id", id, "err", err)
		case ok:
			m.RowRepaired()
			logger.ErrorContext(ctx, "a final row was rewritten by someone outside jetrun; restored from its final status event",
				"run_id", id, "status", ev.Status, "attempt", ev.Attempt)
		}
	})
	if err != nil {
		return err
	}
	defer view.Stop()

	var srv *http.Server
	stopMCP := func() {}
	httpURL := ""
	serveErr := make(chan error, 1)
	if cfg.HTTPAddr != "" {
		tokens, err := cfg.Tokens()
		if err != nil {
			return err
		}
		mcpSrv := mcpserver.New(mcpserver.Config{Client: client, Logger: logger})
		mcpSrv.Start(life)
		stopMCP = mcpSrv.Stop
		defer mcpSrv.Stop() // idempotent; the normal path stops it below
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("http: listen on %s: %w", cfg.HTTPAddr, err)
		}
		httpURL = "http://" + ln.Addr().String()
		// Requests derive from base, cancelled when shutdown begins, so
		// long-lived event streams end instead of holding the shutdown up.
		base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
		defer cancelBase()
		srv = &http.Server{
			Handler: httpapi.New(httpapi.Config{Client: client, View: view, Conn: nc, Logger: logger, Tokens: tokens,
				Metrics: m.Handler(), MCP: mcpSrv.Handler(), Addr: cfg.HTTPAddr, AllowedHosts: cfg.HTTPHosts}),
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return base },
		}
		srv.RegisterOnShutdown(cancelBase)
		go func() { serveErr <- srv.Serve(ln) }()
	}

	banner(out, cfg, natsCfg.URL, ns != nil, httpURL, pool)
	logger.Info("parent-worker ready", "nats", natsCfg.Redacted(), "http", httpURL)

	var demos sync.WaitGroup
	if cfg.DemoRuns > 0 {
		demos.Go(func() { demoFanOut(ctx, client, cfg.DemoRuns, logger, out, httpURL) })
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("http: %w", err)
	}
	msg, waits := "shutting down: waiting for open HTTP requests and finish deliveries",
		[]any{"http_requests_timeout", httpShutdownTimeout, "finish_deliveries_timeout", cfg.FinishTimeout}
	if pool != nil {
		msg = "shutting down: waiting for open HTTP requests, runs in flight (then handed back) and finish deliveries"
		waits = append(waits, "runs_in_flight", pool.InFlight(), "runs_timeout", cfg.ShutdownTimeout)
	}
	logger.Info(msg, waits...)
	var errs []error
	// MCP calls in flight stop awaiting before their requests' contexts end
	// with the HTTP server's: a request that ends is a cancel in MCP
	// 2026-07-28, and a shutdown must not cancel runs.
	stopMCP()
	if srv != nil {
		hctx, cancel := context.WithTimeout(abort, httpShutdownTimeout)
		if err := srv.Shutdown(hctx); err != nil && abort.Err() == nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if pool != nil {
		pctx, cancel := context.WithTimeout(abort, cfg.ShutdownTimeout)
		errs = append(errs, pool.Shutdown(pctx))
		cancel()
	}
	stopDeliverer()
	stopMeter()
	errs = append(errs, rec.Stop())
	demos.Wait()
	if abort.Err() != nil {
		logger.Info("stopped at once: runs in flight handed back")
		return errors.Join(errs...) // the deferred Close and embedded server shutdown follow
	}
	if err := nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		logger.Warn("drain nats connection", "err", err)
	}
	return errors.Join(errs...)
}

// meterAgentTypes serves the meter's series at 0 for the agent types known
// at start: the pool's and those announced in the agent registry (others
// from their first run on).
func meterAgentTypes(ctx context.Context, m *metrics.Metrics, reg *registry.Registry, pool *worker.Worker, logger *slog.Logger) {
	if pool != nil {
		m.MeterAgentTypes(pool.AgentTypes()...)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	announced, err := reg.Agents(ctx)
	if err != nil {
		logger.WarnContext(ctx, "list the agent registry for metrics; their series appear with their first run", "err", err)
		return
	}
	for _, a := range announced {
		m.MeterAgentTypes(a.AgentType)
	}
}

func banner(out io.Writer, cfg config.ParentWorker, natsURL string, embeddedServer bool, httpURL string, pool *worker.Worker) {
	b := &strings.Builder{}
	fmt.Fprintln(b, "jetrun parent-worker is up")
	where := "external"
	if embeddedServer {
		where = "embedded, store " + cfg.DataDir
	}
	fmt.Fprintf(b, "  NATS        %s  (%s)\n", natsURL, where)
	if embeddedServer && natsURL != config.DefaultChildNATSURL {
		fmt.Fprintf(b, "              not the default port: child-worker and jetrun read it from %s;\n", localurl.Path(cfg.DataDir))
		fmt.Fprintf(b, "              from another directory: export JETRUN_NATS_URL=%s\n", natsURL)
	}
	if httpURL != "" {
		fmt.Fprintf(b, "  web UI      %s/\n", httpURL)
		fmt.Fprintf(b, "  HTTP API    %s/v1/runs  (GET /v1/runs/<id>, /v1/runs/<id>/events, POST /v1/runs)\n", httpURL)
		fmt.Fprintf(b, "  metrics     %s/metrics  (Prometheus)\n", httpURL)
		fmt.Fprintf(b, "  MCP         %s%s  (streamable HTTP; every agent type a tool)\n", httpURL, httpapi.MCPPath)
	}
	if pool != nil {
		fmt.Fprintf(b, "  child pool  %s (in-process, worker %s)\n", strings.Join(pool.AgentTypes(), ","), pool.ID())
	}
	s := "nats -s " + natsURL
	fmt.Fprintf(b, "\nWatch and drive it with the nats CLI:\n")
	fmt.Fprintf(b, "  %s kv watch %s\n", s, wire.Namespace(cfg.Namespace()).RunsBucket())
	fmt.Fprintf(b, "  %s sub '%s'\n", s, wire.Namespace(cfg.Namespace()).RunsWildcard())
	fmt.Fprintf(b, "  %s pub %s '{\"input\":{\"steps\":5,\"stepMs\":300}}'\n", s, cfg.Namespace().DispatchSubject(demo.AgentType))
	if httpURL != "" {
		fmt.Fprintf(b, "  curl -s %s/v1/runs\n", httpURL)
	}
	fmt.Fprintln(b)
	_, _ = io.WriteString(out, b.String())
}

// demoFanOut dispatches n demo runs and reports each outcome. Shutting down
// stops the waiting, not the runs.
func demoFanOut(ctx context.Context, client *parent.Client, n int, logger *slog.Logger, out io.Writer, httpURL string) {
	ids := make([]string, 0, n)
	for i := range n {
		row, err := client.Dispatch(ctx, parent.Request{
			AgentType:    demo.AgentType,
			DisplayOrder: i,
			Input:        map[string]int{"steps": 3 + i%5, "stepMs": 400},
		})
		if err != nil {
			logger.Warn("dispatch demo run", "err", err)
			continue
		}
		ids = append(ids, row.ID)
	}
	fmt.Fprintf(out, "dispatched a fan-out of %d demo runs: %s\n", len(ids), strings.Join(ids, " "))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			res, err := client.Await(ctx, id)
			switch {
			case err == nil:
				fmt.Fprintf(out, "demo run %s completed: %s\n", id, res.Summary)
			case ctx.Err() == nil:
				logger.Warn("demo run did not complete", "run_id", id, "err", err)
			}
		})
	}
	wg.Wait()
	if ctx.Err() == nil && httpURL != "" {
		fmt.Fprintf(out, "demo fan-out done; see the runs with: curl -s %s/v1/runs  (Ctrl-C stops the parent-worker)\n", httpURL)
	}
}
