package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/pkg/events"
)

// ReadSteps reads the steps stored on subject (a run's step subject) of
// stream from sequence from, one direct get by subject at a time: the
// stream's subject index finds each, no consumer and no scan of other
// runs' events. Malformed step events are skipped.
func ReadSteps(ctx context.Context, stream jetstream.Stream, subject string, from uint64) ([]events.Step, error) {
	var out []events.Step
	for seq := max(from, 1); ; {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("subagent: read steps on %s: %w", subject, err)
		}
		seq = m.Sequence + 1
		var st events.Step
		if json.Unmarshal(m.Data, &st) == nil && st.Name != "" {
			out = append(out, st)
		}
	}
}
