// Package agents is the registry of the agent types the binaries serve: the
// built-in ones by name (demo), and the http and exec agent types the
// configuration defines (package httpagent, execagent), which hand runs to
// children written in any language.
package agents

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/worker"
)

func builtins() map[string]func() worker.Handler {
	return map[string]func() worker.Handler{
		demo.AgentType: demo.Handler,
	}
}

// Names lists the built-in agent types.
func Names() []string { return slices.Sorted(maps.Keys(builtins())) }

// Configured holds the agent types defined by configuration, by name.
type Configured struct {
	HTTP map[string]httpagent.Config
	Exec map[string]execagent.Config
	// Info describes configured agent types in the agent registry (a
	// description and JSON Schemas); a type without an entry is announced
	// without them.
	Info map[string]worker.AgentInfo
}

// Names lists the configured agent types.
func (c Configured) Names() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for name := range c.HTTP {
			if !yield(name) {
				return
			}
		}
		for name := range c.Exec {
			if !yield(name) {
				return
			}
		}
	})
}

// StartPool starts a worker on rt serving the named built-in agent types
// and every configured one.
func StartPool(ctx context.Context, rt *jetrun.Runtime, cfg worker.Config, names []string, conf Configured) (*worker.Worker, error) {
	w, err := worker.New(rt, cfg)
	if err != nil {
		return nil, err
	}
	if err := Register(w, names, conf); err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// Register adds to w the handler of each named built-in agent type and of
// every configured one. A name that is both is an error.
func Register(w *worker.Worker, names []string, conf Configured) error {
	all := builtins()
	seen := map[string]bool{}
	for name, c := range conf.HTTP {
		if _, dup := conf.Exec[name]; dup {
			return fmt.Errorf("agent type %q is configured both as an http and an exec agent", name)
		}
		if _, ok := all[name]; ok {
			return fmt.Errorf("http agent type %q has the name of a built-in agent type", name)
		}
		w.HandleWith(name, httpagent.Handler(c), conf.Info[name])
		seen[name] = true
	}
	for name, c := range conf.Exec {
		if _, ok := all[name]; ok {
			return fmt.Errorf("exec agent type %q has the name of a built-in agent type", name)
		}
		w.HandleWith(name, execagent.Handler(c), conf.Info[name])
		seen[name] = true
	}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		h, ok := all[name]
		if !ok {
			return fmt.Errorf("unknown agent type %q; built-in agent types: %v, configured: %v", name, Names(), conf.Names())
		}
		w.HandleWith(name, h(), builtinInfo[name])
	}
	return nil
}
