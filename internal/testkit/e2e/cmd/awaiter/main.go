// Command awaiter is a test parent process: it calls parent.Run for one run
// and prints the outcome as JSON. The end-to-end tests kill it with -9 while
// it awaits and start another one with the same run id.
//
// Usage: awaiter NATS_URL RUN_ID INPUT_JSON
//
// JETRUN_REATTACH_NO_PROGRESS (a Go duration) sets its no-progress window.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: awaiter NATS_URL RUN_ID INPUT_JSON")
		os.Exit(2)
	}
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer nc.Close()
	ctx := context.Background()
	var cfg parent.Config
	if v := os.Getenv("JETRUN_REATTACH_NO_PROGRESS"); v != "" {
		if cfg.ReattachNoProgress, err = time.ParseDuration(v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	rt, err := jetrun.Open(ctx, nc, jetrun.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client, err := parent.New(rt, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "awaiting", os.Args[2])
	res, err := client.Run(ctx, parent.Request{AgentType: "demo", RunID: os.Args[2], Input: json.RawMessage(os.Args[3])})
	out := map[string]any{"ok": err == nil}
	var f *parent.Failure
	if errors.As(err, &f) {
		out["failure"] = f
	}
	if err != nil {
		out["error"] = err.Error()
	} else {
		out["summary"], out["output"] = res.Summary, res.Output
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	if err != nil {
		os.Exit(1)
	}
}
