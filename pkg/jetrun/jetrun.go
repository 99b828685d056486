package jetrun

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// Config says where a Runtime's streams and buckets are and how they are
// created. Zero values mean defaults.
type Config struct {
	// Namespace is the subject prefix (default "jetrun").
	Namespace events.Namespace
	// Streams tunes the streams and buckets when Open creates them;
	// existing ones are used as they are.
	Streams events.StreamOptions
}

// validate reports every invalid field at once. It does no I/O.
func (c Config) validate() error {
	if err := c.Streams.Validate(); err != nil {
		return fmt.Errorf("jetrun: config: %w", err)
	}
	return nil
}

// Runtime is jetrun's streams and buckets in one namespace, opened once
// and shared by the roles of a process (parent.New, worker.New, finish.New,
// meter.New). It is safe for concurrent use.
type Runtime struct {
	engine *engine.Runtime
}

func init() {
	engine.SetFrom(func(rt engine.Public) *engine.Runtime {
		if r, _ := rt.(*Runtime); r != nil {
			return r.engine
		}
		return nil
	})
}

// Open creates (or checks) jetrun's streams and buckets in cfg.Namespace on
// nc and binds them. The connection stays the caller's: nothing in jetrun
// closes it. A Runtime subscribes once on nc, to the answers of its writes
// (an inbox of its own), for as long as nc is open: open one per process,
// not one per request.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Runtime, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e, err := engine.Open(ctx, nc, engine.Config{Namespace: wire.Namespace(cfg.Namespace), Streams: cfg.Streams})
	if err != nil {
		return nil, err
	}
	return &Runtime{engine: e}, nil
}

// Namespace returns the runtime's namespace.
func (rt *Runtime) Namespace() events.Namespace { return events.Namespace(rt.engine.Namespace()) }
