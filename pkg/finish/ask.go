package finish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
)

// Ask is what an ask handler receives: a new open ask, a question a run
// waits on a person to answer (docs/protocol.md, "People in the loop").
type Ask = events.Ask

// AskIdempotencyKey is the key an ask handler deduplicates on: ask.<id>,
// the new-ask webhook's Idempotency-Key too.
func AskIdempotencyKey(a *Ask) string { return "ask." + a.ID }

// AskHandler hears each new ask, to post it to a chat say. It is called
// once per ask on the happy path; a returned error is tried again after a
// growing pause (AskConfig.Retry, doubling up to 5 minutes) while the ask
// is open. It is at least once: a process that dies between the handler's
// return and the record of it (Ask.Notified[name]), or two notifiers of
// one name, may call it twice for an ask, so deduplicate on
// AskIdempotencyKey.
type AskHandler interface {
	ServeAsk(ctx context.Context, ask *Ask) error
}

// AskHandlerFunc adapts a function to an AskHandler.
type AskHandlerFunc func(ctx context.Context, ask *Ask) error

// ServeAsk calls f.
func (f AskHandlerFunc) ServeAsk(ctx context.Context, ask *Ask) error { return f(ctx, ask) }

// AskConfig configures an AskNotifier.
type AskConfig struct {
	// Name names the hook (required, a token): each ask records when the
	// hook of each name took it, so hooks of two names both get every
	// ask, and a notifier restarted under its name does not get again
	// those it took.
	Name string
	// Retry is the first pause after a failed call (default 5s).
	Retry  time.Duration
	Logger *slog.Logger
}

// AskNotifier delivers each new open ask of a runtime to an AskHandler,
// from an in-memory index of the asks bucket (jetrun_asks): the Go
// counterpart of the parent-worker's JETRUN_ASK_WEBHOOK.
type AskNotifier struct {
	rt     *jetrun.Runtime
	h      AskHandler
	cfg    AskConfig
	view   *asks.View
	keeper *asks.Keeper
}

// NewAskNotifier returns a notifier of rt's new asks to h. It does no I/O:
// Start loads the asks.
func NewAskNotifier(rt *jetrun.Runtime, h AskHandler, cfg AskConfig) (*AskNotifier, error) {
	var errs []error
	if rt == nil || h == nil {
		errs = append(errs, errors.New("a runtime and a handler are required"))
	}
	if err := events.ValidateToken("ask hook name", cfg.Name); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("finish: new ask notifier: %w", err)
	}
	return &AskNotifier{rt: rt, h: h, cfg: cfg}, nil
}

// Start loads the asks (ctx bounds the load), then hands each open ask
// not taken yet by a hook of this name to the handler, and each new one
// as it comes, until Shutdown.
func (n *AskNotifier) Start(ctx context.Context) error {
	st := engine.From(n.rt).Asks()
	view, err := asks.StartView(ctx, st, n.cfg.Logger)
	if err != nil {
		return fmt.Errorf("finish: start ask notifier %s: %w", n.cfg.Name, err)
	}
	n.view = view
	n.keeper = asks.NewKeeper(st, view, asks.KeeperConfig{NotifyOnly: true, NotifyName: n.cfg.Name,
		Notify: n.h.ServeAsk, NotifyRetry: n.cfg.Retry, Logger: n.cfg.Logger})
	return n.keeper.Start(context.WithoutCancel(ctx))
}

// Shutdown stops the notifier, waiting for a handler call in flight until
// ctx ends. It is safe before Start and idempotent.
func (n *AskNotifier) Shutdown(ctx context.Context) error {
	if n.keeper != nil {
		_ = n.keeper.Shutdown(ctx)
	}
	if n.view != nil {
		n.view.Stop()
	}
	return nil
}
