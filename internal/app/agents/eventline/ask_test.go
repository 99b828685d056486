package eventline_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/pkg/events"
)

// A wait or call line may carry an ask; a malformed one is a format error
// naming what is wrong.
func TestParseAsk(t *testing.T) {
	ev, err := eventline.Parse(1, []byte(`{"wait":"approve","ask":{"kind":"approve","title":"ok?","payload":{"diff":"+1"},"deadlineMs":60000,"default":{"approved":false}}}`))
	if err != nil || len(ev.Ask) != 1 {
		t.Fatalf("wait with an ask: %+v %v", ev, err)
	}
	if a := ev.Ask[0]; a.Kind != events.AskApprove || a.Title != "ok?" || a.Deadline != time.Minute || a.Payload == nil || a.Default == nil {
		t.Fatalf("ask %+v", a)
	}
	ev, err = eventline.Parse(2, []byte(`{"call":{"name":"pick","input":1,"ask":{"kind":"choose","choices":["a","b"]}}}`))
	if err != nil || len(ev.Ask) != 1 || ev.Ask[0].Choices[1] != "b" {
		t.Fatalf("call with an ask: %+v %v", ev, err)
	}
	if ev, err := eventline.Parse(3, []byte(`{"wait":"go"}`)); err != nil || len(ev.Ask) != 0 {
		t.Fatalf("a wait without an ask: %+v %v", ev, err)
	}
	for line, want := range map[string]string{
		`{"wait":"go","ask":{"kind":"vote"}}`:      `"ask.kind"`,
		`{"wait":"go","ask":{"kind":"choose"}}`:    `"ask.choices"`,
		`{"wait":"go","ask":"approve"}`:            `"ask" must be an object`,
		`{"call":{"name":"c","ask":{"kind":"x"}}}`: `"ask.kind"`,
		`{"wait":"go","ask":{"deadlineMs":-1}}`:    `"ask" must be an object`,
	} {
		_, err := eventline.Parse(4, []byte(line))
		var fe *eventline.FormatError
		if !errors.As(err, &fe) || !strings.Contains(fe.Reason, want) {
			t.Errorf("%s: %v; want a format error with %s", line, err, want)
		}
	}
}
