package natsconn

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestDispatchConsumerCreateIsRecognized(t *testing.T) {
	violation := func(subject string) error {
		return fmt.Errorf("%w: Permissions Violation for Publish to %q", nats.ErrPermissionViolation, subject)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{violation("$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.agent-demo.jetrun.dispatch.demo"), true},
		{violation("$JS.API.CONSUMER.CREATE.OTHER_DISPATCH.dispatch-malformed"), true},
		{violation("$JS.API.CONSUMER.CREATE.JETRUN_EVENTS.meter"), false},
		{violation("$JS.API.CONSUMER.DELETE.JETRUN_DISPATCH.agent-demo"), false},
		{violation("jetrun.dispatch.demo"), false},
		{fmt.Errorf("Publish to %q", "$JS.API.CONSUMER.CREATE.JETRUN_DISPATCH.x"), false},
	} {
		if _, got := dispatchConsumerCreate(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}
