package events_test

import (
	"errors"
	"testing"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestNestedAndCallNames(t *testing.T) {
	ns := events.Namespace("")
	for got, want := range map[string]string{
		wire.ChildChunkMsgID("p1", "c1", 7):        "p1.cc.c1.7",
		wire.CallMsgID("r1", 3):                    "r1.call.3",
		wire.ReplyMsgID("r1", 3):                   "r1.reply.3",
		wire.Namespace(ns).CallWildcard():          "jetrun.run.*.call",
		ns.RunSubject("r1", events.KindCall):       "jetrun.run.r1.call",
		ns.RunSubject("r1", events.KindReply):      "jetrun.run.r1.reply",
		ns.RunSubject("p1", events.KindChildChunk): "jetrun.run.p1.child-chunk",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	for _, tc := range []struct {
		name    string
		wantErr error
	}{
		{"ask-user", nil},
		{"", events.ErrInvalidID},
		{"a.b", events.ErrInvalidID},
		{"a*", events.ErrInvalidID},
		{"a b", events.ErrInvalidID},
	} {
		if err := events.ValidateToken("call name", tc.name); !errors.Is(err, tc.wantErr) {
			t.Errorf("ValidateToken(call name, %q) = %v, want %v", tc.name, err, tc.wantErr)
		}
	}
	runID, kind, err := wire.Namespace(ns).ParseRunSubject("jetrun.run.p1.child-chunk")
	if err != nil || runID != "p1" || kind != events.KindChildChunk {
		t.Errorf("parse child-chunk subject: %q %q %v", runID, kind, err)
	}
}
