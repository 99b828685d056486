package parentworker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/app/config"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

// openLimits opens (creating) the provider limits bucket and stores the
// limits JETRUN_LIMITS sets: configuration wins over a change made by HTTP
// since the last start; limits set only by HTTP stay.
func openLimits(ctx context.Context, js jetstream.JetStream, cfg config.ParentWorker) (*limits.Store, error) {
	specs, err := cfg.LimitSpecs()
	if err != nil {
		return nil, err
	}
	st, err := limits.Open(ctx, js, wire.Namespace(cfg.Namespace()), cfg.Streams.Runtime().Streams.Replicas)
	if err != nil {
		return nil, err
	}
	for _, spec := range specs {
		if err := st.Put(ctx, spec); err != nil {
			return nil, err
		}
	}
	return st, nil
}
