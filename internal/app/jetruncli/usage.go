package jetruncli

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// usageLines are the lines jetrun get prints about a run's usage and
// budget: its own usage (per model), its tree's, its budget and what
// stopped its tree.
func usageLines(r *jetruntype.Run) [][2]string {
	var out [][2]string
	if u := r.Usage; u != nil {
		line := totals(u.UsageTotals)
		if len(u.Models) > 0 {
			var per []string
			for _, m := range slices.Sorted(maps.Keys(u.Models)) {
				per = append(per, m+": "+totals(u.Models[m]))
			}
			line += " (" + strings.Join(per, "; ") + ")"
		}
		out = append(out, [2]string{"usage", line})
	}
	if t := r.TreeUsage; t != nil {
		out = append(out, [2]string{"tree usage", totals(*t)})
	}
	if b := r.Budget; b != nil {
		var parts []string
		for _, p := range []struct {
			name string
			n    int64
		}{{"tokens", b.Tokens}, {"costMicros", b.CostMicros}, {"runs", b.Runs}} {
			if p.n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", p.name, p.n))
			}
		}
		out = append(out, [2]string{"budget", strings.Join(parts, ", ")})
	}
	if o := r.Overrun; o != nil {
		out = append(out, [2]string{"overrun", o.String()})
	}
	return out
}

func totals(t jetruntype.UsageTotals) string {
	return fmt.Sprintf("%d in + %d out tokens, %d micros", t.InputTokens, t.OutputTokens, t.CostMicros)
}
