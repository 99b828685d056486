package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/pkg/events"
)

// A dispatch's tenant is a token: anything else dead-letters the
// dispatch with the reason.
func TestDispatchTenant(t *testing.T) {
	d, err := events.DecodeDispatch([]byte(`{"input": {}, "tenant": "acme-1"}`))
	if err != nil || d.Tenant != "acme-1" {
		t.Fatalf("a good tenant: %+v, %v", d, err)
	}
	_, err = events.DecodeDispatch([]byte(`{"input": {}, "tenant": "acme.*"}`))
	if !errors.Is(err, events.ErrBadDispatch) || !strings.Contains(err.Error(), `"tenant"`) {
		t.Fatalf("a bad tenant: %v; want ErrBadDispatch naming \"tenant\"", err)
	}
}
