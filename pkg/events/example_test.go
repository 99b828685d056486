package events_test

import (
	"fmt"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

func ExampleNamespace() {
	var ns events.Namespace // the default prefix, "jetrun"
	fmt.Println(ns.DispatchSubject("demo"))
	fmt.Println(ns.RunWildcard("r1"))
	fmt.Println(ns.SignalSubject("r1", "approve"))
	fmt.Println(wire.Namespace(ns).EventsStream(), wire.Namespace(ns).RunsBucket())
	// Output:
	// jetrun.dispatch.demo
	// jetrun.run.r1.>
	// jetrun.signal.r1.approve
	// JETRUN_EVENTS jetrun_runs
}

func ExampleValidateID() {
	fmt.Println(events.ValidateID("import-42"))
	fmt.Println(events.ValidateID("a.b"))
	// Output:
	// <nil>
	// invalid id: run id "a.b" has '.' at position 1; only letters, digits, '-' and '_' are allowed
}

func ExampleDecodeDispatch() {
	d, err := events.DecodeDispatch([]byte(`{"runId":"r1","input":{"steps":3}}`))
	fmt.Println(d.RunID, string(d.Input), err)
	_, err = events.DecodeDispatch([]byte(`{"runId":"r1"}`))
	fmt.Println(err)
	// Output:
	// r1 {"steps":3} <nil>
	// bad dispatch: "input" is required
}
