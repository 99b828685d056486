// Package agents is the registry of built-in agent types the binaries can
// serve by name.
package agents

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/agents/demo"
	"github.com/jetrun/jetrun/pkg/worker"
)

func builtins() map[string]func() worker.Handler {
	return map[string]func() worker.Handler{
		demo.AgentType: demo.Handler,
	}
}

// Names lists the built-in agent types.
func Names() []string { return slices.Sorted(maps.Keys(builtins())) }

// StartPool starts a worker on nc serving the named built-in agent types.
func StartPool(ctx context.Context, nc *nats.Conn, cfg worker.Config, names []string) (*worker.Worker, error) {
	w, err := worker.New(nc, cfg)
	if err != nil {
		return nil, err
	}
	if err := Register(w, names); err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Register adds the built-in handler of each named agent type to w.
func Register(w *worker.Worker, names []string) error {
	all := builtins()
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		h, ok := all[name]
		if !ok {
			return fmt.Errorf("unknown agent type %q; built-in agent types: %v", name, Names())
		}
		w.Handle(name, h())
	}
	return nil
}
