package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestDecodeDispatchChecksOnMilestones(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ payload, want string }{
		{`{"input":{},"detached":{"onFinish":"h","onMilestones":["plan","review"]}}`, ""},
		{`{"input":{},"detached":{"onMilestones":["plan"]}}`, `needs "detached.onFinish"`},
		{`{"input":{},"detached":{"onFinish":"h","onMilestones":["a.b"]}}`, `"detached.onMilestones[0]"`},
		{`{"input":{},"detached":{"onFinish":"h","onMilestones":["x","x"]}}`, `listed twice`},
		{`{"input":{},"detached":{"onFinish":"h","onMilestones":[""]}}`, `milestone name is empty`},
		{`{"input":{},"detached":{"onFinish":"h","onMilestones":"plan"}}`, `must be an array`},
	} {
		d, err := events.DecodeDispatch([]byte(tc.payload))
		if tc.want == "" {
			if err != nil || !wire.Notifies(d.Detached, "plan") || wire.Notifies(d.Detached, "draft") {
				t.Errorf("%s: %v", tc.payload, err)
			}
			continue
		}
		if !errors.Is(err, events.ErrBadDispatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %s", tc.payload, err, tc.want)
		}
	}
	if got := wire.MilestoneNoticeMsgID("r1", "plan"); got != "r1.milestone.plan" {
		t.Fatalf("notice msg id %q", got)
	}
}
