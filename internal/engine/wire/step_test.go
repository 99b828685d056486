package wire_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestValidateStepName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		wantErr error
	}{
		{"plan-3", nil},
		{"search:tides.v2_a", nil},
		{strings.Repeat("s", events.MaxStepNameLength), nil},
		{"", events.ErrInvalidID},
		{strings.Repeat("s", events.MaxStepNameLength+1), events.ErrInvalidID},
		{"a b", events.ErrInvalidID},
		{"a\r\nNats-Msg-Id: x", events.ErrInvalidID},
		{"a*", events.ErrInvalidID},
		{"a>", events.ErrInvalidID},
		{"é", events.ErrInvalidID},
	} {
		if err := events.ValidateStepName(tc.name); !errors.Is(err, tc.wantErr) {
			t.Errorf("ValidateStepName(%q) = %v, want %v", tc.name, err, tc.wantErr)
		}
	}
}

// A step event goes to the events stream as it is created (its subject is
// under the run's), is stored once per Nats-Msg-Id, and replays decoded.
func TestStepEventStoredOnceAndReplayed(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := wire.EnsureStreams(ctx, js, "", events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := events.Namespace("").RunSubject("s1", events.KindStep)
	if subject != "jetrun.run.s1.step" {
		t.Fatalf("step subject = %q", subject)
	}
	for _, data := range []string{
		`{"runId":"s1","name":"plan-1","output":{"n":1},"attempt":1,"at":"2026-01-01T00:00:00Z","durationMs":7}`,
		`{"runId":"s1","name":"plan-1","output":{"n":2},"attempt":2,"at":"2026-01-01T00:00:01Z"}`, // a second copy
	} {
		msg := &nats.Msg{Subject: subject, Data: []byte(data), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, wire.StepMsgID("s1", "plan-1"))
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := replayAll(ctx, js, "s1", events.ReplayOptions{Follow: events.HistoryOnly})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Kind != events.KindStep || evs[0].Step == nil {
		t.Fatalf("replayed %v, want one decoded step", kindsOf(evs))
	}
	st := evs[0].Step
	if st.Name != "plan-1" || string(st.Output) != `{"n":1}` || st.Attempt != 1 || st.DurationMs != 7 {
		t.Errorf("step = %+v", st)
	}
}

// A step name that validates is safe in a Nats-Msg-Id header: no
// whitespace, control characters or wildcards, and within the limit.
func FuzzValidateStepName(f *testing.F) {
	for _, s := range []string{"plan-1", "search:tides.v2", "", "a b", "a\r\n", "a*", ">", strings.Repeat("x", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if events.ValidateStepName(name) != nil {
			return
		}
		if name == "" || len(name) > events.MaxStepNameLength || strings.ContainsAny(name, " \t\r\n*>\x00") {
			t.Fatalf("ValidateStepName accepted %q", name)
		}
		if id := wire.StepMsgID("r1", name); id != "r1.step."+name {
			t.Fatalf("StepMsgID = %q", id)
		}
	})
}
