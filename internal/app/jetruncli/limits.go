package jetruncli

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/limits"
	"github.com/jetrun/jetrun/internal/engine/wire"
)

func init() { commands["limits"] = (*cli).limitsCmd }

// limitsCmd lists the provider limits with what the fleet uses of them,
// sets one (set NAME requests=N,tokens=N,...), or pauses one (pause NAME
// DURATION).
func (c *cli) limitsCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	return func(ctx context.Context, args []string) (int, error) {
		e := engine.From(c.rt)
		st, err := limits.Open(ctx, e.JetStream(), wire.Namespace(c.rt.Namespace()), e.Streams().Replicas)
		if err != nil {
			return 0, err
		}
		switch {
		case len(args) == 0:
			return c.listLimits(ctx, st)
		case args[0] == "set" && len(args) == 3:
			specs, err := limits.ParseSpecs(args[1] + ":" + args[2])
			if err != nil {
				return 0, usagef("%v", err)
			}
			if err := st.Put(ctx, specs[0]); err != nil {
				return 0, usagef("%v", err)
			}
			return c.listLimits(ctx, st)
		case args[0] == "pause" && len(args) == 3:
			d, err := time.ParseDuration(args[2])
			if err != nil || d <= 0 || d > limits.MaxPause {
				return 0, usagef("pause %q: want a duration from 1ms to %s", args[2], limits.MaxPause)
			}
			if _, err := st.Spec(ctx, args[1]); err != nil {
				return 0, usagef("%v", err)
			}
			if _, err := st.SetPause(ctx, args[1], time.Now().Add(d), "jetrun limits pause", "cli"); err != nil {
				return 0, err
			}
			return c.listLimits(ctx, st)
		}
		return 0, usagef("want no arguments, set NAME requests=N,tokens=N,concurrent=N,window=D, or pause NAME DURATION")
	}
}

func (c *cli) listLimits(ctx context.Context, st *limits.Store) (int, error) {
	all, err := st.Statuses(ctx)
	if err != nil {
		return 0, err
	}
	if c.json {
		return ExitOK, c.printJSON(map[string]any{"limits": all})
	}
	if len(all) == 0 {
		fmt.Fprintln(c.out, "no limits (JETRUN_LIMITS, jetrun limits set, PUT /v1/limits/{name})")
		return ExitOK, nil
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tWINDOW\tREQUESTS\tTOKENS\tCONCURRENT\tWAITING\tWORKERS\tPAUSED\tTENANTS")
	for _, s := range all {
		last := s.Current
		if s.Pool.Last != nil {
			last = *s.Pool.Last
		}
		paused := "-"
		if s.Paused {
			paused = fmt.Sprintf("until %s (%s)", s.Pause.Until().Format(time.TimeOnly), s.Pause.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Spec.Name, s.Spec.Window(),
			ofRate(s.Current.Requests, s.Spec.Requests), ofRate(s.Current.Tokens, s.Spec.Tokens),
			ofRate(s.InUse, s.Spec.Concurrent), s.Waiting, s.Holders, paused, shares(last.Tenants))
	}
	return ExitOK, tw.Flush()
}

// ofRate prints "used/limit", or "used/-" when the dimension is not
// limited.
func ofRate(used, limit int64) string {
	if limit == 0 {
		return fmt.Sprintf("%d/-", used)
	}
	return fmt.Sprintf("%d/%d", used, limit)
}

// shares prints each tenant's share of the requests.
func shares(tenants map[string]int64) string {
	var total int64
	for _, n := range tenants {
		total += n
	}
	if total == 0 {
		return "-"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", t, 100*float64(tenants[t])/float64(total)))
	}
	return strings.Join(parts, ", ")
}
