package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// NextEventSeq returns the sequence the next message of run id's events
// stream will get: a re-run's row, created before its given steps are
// stored (GiveSteps), starts its events there (FirstEventSeq), so its
// first attempt reads them as a takeover reads the steps of earlier
// attempts, and its handler finds them stored instead of executing them.
func (rt *Runtime) NextEventSeq(ctx context.Context, id string) (uint64, error) {
	info, err := rt.EventsStreamFor(id).Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jetrun: read the events stream of run %s: %w", id, err)
	}
	return info.State.LastSeq + 1, nil
}

// GiveSteps stores steps on the step subject of run id, a re-run not yet
// dispatched, each under its step message id (wire.StepMsgID), in order,
// and returns the stream sequence of the first. Each step is stored marked
// GivenFrom and without usage: its work was paid by the run it came from,
// and nothing counts it again (StoredStepUsage, a worker's step usage).
// It is idempotent within the dedup window: a step stored before answers
// with its first copy's sequence.
func (rt *Runtime) GiveSteps(ctx context.Context, id, from string, steps []events.Step) (first uint64, err error) {
	subject := rt.EventSubject(id, events.KindStep)
	for _, st := range steps {
		st.RunID, st.GivenFrom, st.Usage = id, from, nil
		data, err := json.Marshal(st)
		if err != nil {
			return 0, fmt.Errorf("jetrun: encode step %s given to run %s: %w", st.Name, id, err)
		}
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, wire.StepMsgID(id, st.Name))
		ack, err := rt.pub.Publish(ctx, msg)
		if err != nil {
			return 0, fmt.Errorf("jetrun: store step %s given to run %s: %w", st.Name, id, err)
		}
		if first == 0 || ack.Sequence < first {
			first = ack.Sequence
		}
	}
	return first, nil
}
