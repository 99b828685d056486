package events

import (
	"errors"
	"fmt"
)

// MaxReserveAmount bounds each count of a reservation (input tokens,
// output tokens, cost in micros): a larger one is taken for a mistake (a
// unit or sign error), not a plan, and refused before it reserves anything.
const MaxReserveAmount = 1_000_000_000_000

// ValidateReserve checks the amount of a reservation ({"reserve": {...}},
// worker.Run.Reserve): its counts as a usage report's (UsageReport.Validate),
// at least one of them above zero, none above MaxReserveAmount.
func ValidateReserve(u UsageReport) error {
	if err := u.Validate(); err != nil {
		return err
	}
	counts := []struct {
		name string
		n    int64
	}{{"inputTokens", u.InputTokens}, {"outputTokens", u.OutputTokens}, {"costMicros", u.CostMicros}}
	for _, c := range counts {
		if c.n > MaxReserveAmount {
			return fmt.Errorf("reserve %s is %d; the most one reservation may hold is %d", c.name, c.n, int64(MaxReserveAmount))
		}
	}
	if u.InputTokens == 0 && u.OutputTokens == 0 && u.CostMicros == 0 {
		return errors.New("a reservation must hold some tokens or cost; this one is empty")
	}
	return nil
}
