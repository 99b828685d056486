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
	"slices"
	"strings"
	"sync"
	"time"

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
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/obs"
	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/service"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/finish"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/kv"
	"github.com/jetrun/jetrun/pkg/meter"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/reconcile"
	"github.com/jetrun/jetrun/pkg/worker"
)

// httpShutdownTimeout bounds how long open HTTP requests may finish.
const httpShutdownTimeout = 5 * time.Second

// Run serves until ctx is done, then stops its services in order (see
// build) and closes the NATS connection and the embedded server. Once
// abort is done too, every step stops waiting (the pool hands its runs
// back at once) and the embedded server is shut down cleanly, so its store
// needs no recovery at the next start. The banner (where to look) goes to
// out.
//
// What another process may hold is claimed first, before the store is
// opened: the data directory's lock (two embedded servers on one store
// corrupt it), then the HTTP address.
func Run(ctx, abort context.Context, cfg config.ParentWorker, logger *slog.Logger, out io.Writer) error {
	if cfg.NATS.URL == "" {
		lock, err := embedded.Lock(cfg.DataDir)
		if err != nil {
			return err
		}
		defer func() { _ = lock.Unlock() }() // after closeNATS: the server is down
	}
	ln, err := listenHTTP(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	if ln != nil {
		defer func() { _ = ln.Close() }() // the HTTP server closes it once it served
	}
	nc, natsCfg, closeNATS, err := connect(cfg, logger)
	if err != nil {
		return err
	}
	defer closeNATS()
	// Log records that are events (reconcile.begin, finish.delivered, …)
	// are also published on jetrun.obs.<event>.
	logger = slog.New(obs.NewHandler(logger.Handler(), nc, wire.Namespace(cfg.Namespace()), "parent-worker"))
	p, err := build(ctx, abort, cfg, nc, ln, logger)
	if err != nil {
		return err
	}
	if err := service.StartAll(ctx, p.start...); err != nil {
		return err
	}
	if p.pool != nil {
		p.metrics.WorkerAgentTypes(p.pool.AgentTypes()...)
	}
	if cfg.Meter {
		meterAgentTypes(ctx, p.metrics, p.registry, p.pool, logger)
	}
	banner(out, cfg, natsCfg.URL, cfg.NATS.URL == "", p.httpURL, p.pool)
	logger.Info("parent-worker ready", "nats", natsCfg.Redacted(), "http", p.httpURL)
	var demos sync.WaitGroup
	demoCtx, stopDemos := context.WithCancel(ctx)
	defer stopDemos()
	if cfg.DemoRuns > 0 {
		demos.Go(func() { demoFanOut(demoCtx, p.client, cfg.DemoRuns, logger, out, p.httpURL) })
	}

	var errs []error
	select {
	case <-ctx.Done():
	case err := <-p.serveErr:
		errs = append(errs, fmt.Errorf("http: %w", err))
	}
	stopDemos()
	msg, waits := "shutting down: waiting for open HTTP requests and finish deliveries",
		[]any{"http_requests_timeout", httpShutdownTimeout, "finish_deliveries_timeout", cfg.FinishTimeout}
	if p.pool != nil {
		msg = "shutting down: waiting for open HTTP requests, runs in flight (then handed back) and finish deliveries"
		waits = append(waits, "runs_in_flight", p.pool.InFlight(), "runs_timeout", cfg.ShutdownTimeout)
	}
	logger.Info(msg, waits...)
	for _, stage := range p.stop {
		errs = append(errs, service.StopAll(abort, stage...))
	}
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

// listenHTTP opens the HTTP API's listener on addr (nil when addr is empty),
// so a busy address fails the start before anything else is opened.
func listenHTTP(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen on %s: %w; set JETRUN_HTTP_ADDR to a free address "+
			"(JETRUN_HTTP_ADDR= serves no HTTP API)", addr, err)
	}
	return ln, nil
}

// connect starts the embedded nats-server when no URL is configured (the
// settings it returns have its URL), and connects. closeNATS closes the
// connection and shuts the server down.
func connect(cfg config.ParentWorker, logger *slog.Logger) (nc *nats.Conn, natsCfg config.NATS, closeNATS func(), err error) {
	natsCfg = cfg.NATS
	var extra []nats.Option
	cleanups := []func(){}
	closeNATS = func() {
		for _, f := range slices.Backward(cleanups) {
			f()
		}
	}
	if natsCfg.URL == "" {
		ns, err := embedded.Start(embedded.Config{
			StoreDir: cfg.DataDir, Host: cfg.EmbeddedHost, Port: cfg.EmbeddedPort,
			MaxMemory: cfg.EmbeddedMaxMem, MaxStore: cfg.EmbeddedMaxFS, SyncAlways: cfg.SyncAlways, Logger: logger,
		})
		if err != nil {
			return nil, natsCfg, nil, err
		}
		cleanups = append(cleanups, func() {
			ns.Shutdown()
			ns.WaitForShutdown()
			logger.Info("embedded nats-server stopped")
		})
		natsCfg.URL = ns.ClientURL()
		extra = append(extra, nats.InProcessServer(ns)) // this process's own components skip the socket
		// child-worker and jetrun find the server through this file when
		// it is not on the default port (see localurl).
		if err := localurl.Write(cfg.DataDir, natsCfg.URL); err != nil {
			closeNATS()
			return nil, natsCfg, nil, err
		}
		cleanups = append(cleanups, func() {
			if err := localurl.Remove(cfg.DataDir, ns.ClientURL()); err != nil {
				logger.Warn("remove the nats-url file", "err", err)
			}
		})
	}
	nc, err = natsconn.Connect(natsCfg, "jetrun parent-worker", logger, extra...)
	if err != nil {
		closeNATS()
		return nil, natsCfg, nil, err
	}
	cleanups = append(cleanups, nc.Close)
	return nc, natsCfg, closeNATS, nil
}

// process is what Run serves: its services, in the order they start
// (start) and the stages they stop in (stop).
type process struct {
	client   *parent.Client
	metrics  *metrics.Metrics
	registry *registry.Registry
	pool     *worker.Worker // nil without children
	start    []service.Service
	stop     [][]service.Service
	httpURL  string     // set once the HTTP server started ("" without one)
	serveErr chan error // the HTTP server's failure
}

// build opens the runtime, prepares the buckets and builds the services.
// It starts none of them.
func build(ctx, abort context.Context, cfg config.ParentWorker, nc *nats.Conn, ln net.Listener, logger *slog.Logger) (*process, error) {
	// One runtime for every role of the process: it creates (or checks)
	// the streams and buckets.
	rt, err := jetrun.Open(ctx, nc, cfg.Streams.Runtime())
	if err != nil {
		return nil, err
	}
	pcfg := cfg.Reattach.ParentConfig(logger)
	pcfg.MaxDepth = cfg.MaxDepth
	client, err := parent.New(rt, pcfg)
	if err != nil {
		return nil, err
	}
	p := &process{client: client, metrics: metrics.New(), serveErr: make(chan error, 1)}
	m := p.metrics
	js := engine.From(rt).JetStream()
	m.WatchLag(js, wire.Namespace(cfg.Namespace()), nil, 0)
	lim, err := openLimits(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	m.WatchLimits(lim, 0)
	if p.registry, err = harden(ctx, rt, cfg, logger); err != nil {
		return nil, err
	}

	rec, err := reconcile.New(rt, reconcile.Config{
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
		return nil, err
	}
	// The run view (started first) follows every row: it is the guard of
	// final rows and vouches for the finishes the deliverer delivers.
	var view *runview.View
	deliverer, err := finish.New(rt, finish.Config{
		ID:          cfg.WorkerID,
		MaxAttempts: cfg.FinishMaxAttempts,
		Timeout:     cfg.FinishTimeout,
		RetryDelay:  cfg.FinishRetryDelay,
		Logger:      logger,
		Observer:    m,
		Vouch:       func(ctx context.Context, f finish.Result) error { return view.Vouch(ctx, f) },
	})
	if err != nil {
		return nil, err
	}
	hooks, err := cfg.Webhooks()
	if err != nil {
		return nil, err
	}
	for name, url := range hooks {
		deliverer.Handle(name, finish.Webhook(url, nil))
		m.FinishHandlers(name)
	}
	var mtr service.Service
	if cfg.Meter {
		if mtr, err = meter.New(rt, meter.Config{Logger: logger,
			OnStart: m.MeterStart, OnFinish: m.MeterFinish, Observer: m}); err != nil {
			return nil, err
		}
	}
	conf, err := cfg.Configured()
	if err != nil {
		return nil, err
	}
	var pool service.Service
	if len(cfg.Children) > 0 || len(conf.Names()) > 0 {
		wcfg := cfg.Pool.WorkerConfig(logger)
		wcfg.Observer = m
		if p.pool, err = worker.New(rt, wcfg); err != nil {
			return nil, err
		}
		if err := agents.Register(p.pool, cfg.Children, conf); err != nil {
			return nil, err
		}
		pool = p.pool
	}
	// The dispatch consumers: the child credential may not create them.
	consumers := &dispatchConsumers{rt: engine.From(rt), reg: p.registry, lease: cfg.Pool.Lease,
		fleet: cfg.Pool.FleetConcurrency, restorer: m, log: logger}
	viewSvc := service.Funcs{
		// The summary of every row, for the HTTP API, is also the guard
		// of final rows: a row seen leaving a final status or changing its
		// ending (rewritten by a credential that may write the runs
		// bucket) is restored from the run's first final status event.
		// Its first load ends with ctx.
		StartFunc: func(context.Context) (err error) {
			view, err = runview.StartGuard(ctx, rt, logger, repairFinal(rt, m, logger))
			return err
		},
		ShutdownFunc: func(context.Context) error { view.Stop(); return nil },
	}
	// The asks index (GET /v1/asks) and its keeper: answers left
	// undelivered, deadlines, asks of runs that ended. After the run view.
	var (
		askView *asks.View
		keeper  *asks.Keeper
	)
	asksSvc := service.Funcs{
		StartFunc: func(context.Context) (err error) {
			if askView, err = asks.StartView(ctx, engine.From(rt).Asks(), logger); err != nil {
				return err
			}
			kcfg := asks.KeeperConfig{Logger: logger,
				RunState: func(id string) (bool, bool) { s, ok := view.Run(id); return ok, ok && s.Final }}
			if cfg.AskWebhook != "" {
				kcfg.Notify = asks.Webhook(cfg.AskWebhook, nil)
			}
			keeper = asks.NewKeeper(engine.From(rt).Asks(), askView, kcfg)
			return keeper.Start(ctx)
		},
		ShutdownFunc: func(ctx context.Context) error {
			if keeper != nil {
				_ = keeper.Shutdown(ctx)
			}
			if askView != nil {
				askView.Stop()
			}
			return nil
		},
	}
	var mcpSvc, httpSvc service.Service
	if ln != nil {
		tokens, err := cfg.Tokens()
		if err != nil {
			return nil, err
		}
		mcpSrv := mcpserver.New(mcpserver.Config{Client: client, Runs: kv.New(rt), Runtime: rt, Logger: logger, Retention: cfg.Retention})
		mcpSvc = service.Funcs{
			StartFunc:    func(ctx context.Context) error { mcpSrv.Start(ctx); return nil },
			ShutdownFunc: func(context.Context) error { mcpSrv.Stop(); return nil },
		}
		httpSvc = p.httpService(abort, ln, func() http.Handler {
			return httpapi.New(httpapi.Config{Client: client, View: view, Conn: nc, Logger: logger, Tokens: tokens,
				Metrics: m.Handler(), MCP: mcpSrv.Handler(), Addr: cfg.HTTPAddr, AllowedHosts: cfg.HTTPHosts,
				Asks: engine.From(rt).Asks(), AskView: askView, Limits: lim})
		})
	}

	p.start = present(consumers, viewSvc, asksSvc, rec, deliverer, mtr, pool, mcpSvc, httpSvc)
	// The stop order is deliberate. MCP calls in flight stop awaiting
	// before their requests' contexts end with the HTTP server's: a
	// request that ends is a cancel in MCP 2026-07-28, and a shutdown must
	// not cancel runs. The HTTP server goes before the pool, so no new
	// work comes in; the pool before the deliverer, so the finishes of the
	// runs that end meanwhile are delivered; the reconciler, the meter
	// and the run view last.
	p.stop = [][]service.Service{
		present(mcpSvc),
		present(httpSvc), // bounded by httpShutdownTimeout
		present(within(cfg.ShutdownTimeout, pool, true)),
		// In-flight deliveries finish, or are retried later.
		present(within(cfg.FinishTimeout, deliverer, false)),
		// Metering is at least once: events in flight are handed out again.
		present(within(0, mtr, false), within(0, rec, true), asksSvc, viewSvc, consumers),
	}
	return p, nil
}

// httpService serves handler() (built once the services it reads have
// started) on ln. Its Shutdown waits at most httpShutdownTimeout for open
// requests; its failure goes to p.serveErr.
func (p *process) httpService(abort context.Context, ln net.Listener, handler func() http.Handler) service.Service {
	var srv *http.Server
	return service.Funcs{
		StartFunc: func(ctx context.Context) error {
			p.httpURL = "http://" + ln.Addr().String()
			// Requests derive from base, cancelled when shutdown begins,
			// so long-lived event streams end instead of holding the
			// shutdown up.
			base, cancelBase := context.WithCancel(ctx)
			srv = &http.Server{
				Handler:           handler(),
				ReadHeaderTimeout: 10 * time.Second,
				BaseContext:       func(net.Listener) context.Context { return base },
			}
			srv.RegisterOnShutdown(cancelBase)
			go func() { p.serveErr <- srv.Serve(ln) }()
			return nil
		},
		ShutdownFunc: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, httpShutdownTimeout)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil && abort.Err() == nil {
				return err
			}
			return nil
		},
	}
}

// within bounds s's Shutdown to d (0: no wait, as Stop); its error is
// returned when report is true, else dropped. A nil s stays nil.
func within(d time.Duration, s service.Service, report bool) service.Service {
	if s == nil {
		return nil
	}
	s = service.Within(d, s)
	if report {
		return s
	}
	return service.Funcs{StartFunc: s.Start, ShutdownFunc: func(ctx context.Context) error { _ = s.Shutdown(ctx); return nil }}
}

// present returns the services that are not nil.
func present(services ...service.Service) []service.Service {
	return slices.DeleteFunc(services, func(s service.Service) bool { return s == nil })
}

// harden opens the agent registry's bucket (parent-worker creates every
// stream and bucket, so child-workers need no permission to create any:
// nats.conf) and refuses roll-ups in the buckets an earlier jetrun created
// allowing them (one message with Nats-Rollup: all from any role that
// writes a key erased the bucket).
func harden(ctx context.Context, rt *jetrun.Runtime, cfg config.ParentWorker, logger *slog.Logger) (*registry.Registry, error) {
	js := engine.From(rt).JetStream()
	reg, err := registry.Open(ctx, js, wire.Namespace(cfg.Namespace()), cfg.Options().Replicas)
	if err != nil {
		return nil, err
	}
	hardened, err := engine.From(rt).Store().Harden(ctx)
	if err != nil {
		return nil, err
	}
	if ok, err := bucket.Harden(ctx, js, wire.Namespace(cfg.Namespace()).AgentsBucket()); err != nil {
		return nil, err
	} else if ok {
		hardened = append(hardened, wire.Namespace(cfg.Namespace()).AgentsBucket())
	}
	for _, b := range hardened {
		logger.Warn("bucket migrated: roll-ups refused from now on", "bucket", b)
	}
	return reg, nil
}

// The guard looks finalEventTries times, finalEventPause apart, for the
// final status event of a run whose final row was rewritten: its writer
// stores the row before the event.
const (
	finalEventTries = 10
	finalEventPause = 200 * time.Millisecond
)

// repairFinal restores a final row someone rewrote from its run's first
// final status event (the run view's guard).
func repairFinal(rt *jetrun.Runtime, m *metrics.Metrics, logger *slog.Logger) func(ctx context.Context, id string) {
	return func(ctx context.Context, id string) {
		ev, ok, err := engine.From(rt).RepairFinal(ctx, id)
		for try := 1; errors.Is(err, engine.ErrNoFinalEvent) && try < finalEventTries && ctx.Err() == nil; try++ {
			t := time.NewTimer(finalEventPause)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			ev, ok, err = engine.From(rt).RepairFinal(ctx, id)
		}
		switch {
		case err != nil:
			logger.ErrorContext(ctx, "a final row was rewritten; repairing it failed", "run_id", id, "err", err)
		case ok:
			m.RowRepaired()
			logger.ErrorContext(ctx, "a final row was rewritten by someone outside jetrun; restored from its final status event",
				"run_id", id, "status", ev.Status, "attempt", ev.Attempt)
		}
	}
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

// demoRunID is the id of the fan-out's demo run i (from 0): demo-1, demo-2, …
func demoRunID(i int) string { return fmt.Sprintf("demo-%d", i+1) }

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
// stops the waiting, not the runs. The runs have stable ids, demo-1 to
// demo-n: a restart on the same store dispatches none again (dispatching
// is idempotent by run id) but re-attaches to them, so each start does not
// add n more runs, and runs a Ctrl-C handed back are waited for again.
func demoFanOut(ctx context.Context, client *parent.Client, n int, logger *slog.Logger, out io.Writer, httpURL string) {
	reqs := make([]parent.Request, n)
	for i := range reqs {
		reqs[i] = parent.Request{
			AgentType:    demo.AgentType,
			RunID:        demoRunID(i),
			DisplayOrder: i,
			Input:        map[string]int{"steps": 3 + i%5, "stepMs": 400},
		}
	}
	ids := make([]string, 0, n)
	existed := 0
	for _, res := range client.DispatchMany(ctx, reqs) {
		if res.Err != nil {
			logger.Warn("dispatch demo run", "run_id", res.RunID, "err", res.Err)
			continue
		}
		ids = append(ids, res.RunID)
		if !res.Created {
			existed++
		}
	}
	if existed == 0 {
		fmt.Fprintf(out, "dispatched a fan-out of %d demo runs: %s\n", len(ids), strings.Join(ids, " "))
	} else {
		fmt.Fprintf(out, "demo fan-out of %d runs: %s (%d from an earlier start: not dispatched again)\n",
			len(ids), strings.Join(ids, " "), existed)
	}
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
