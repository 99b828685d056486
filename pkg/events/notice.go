package events

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MaxOnMilestones bounds Detached.OnMilestones.
const MaxOnMilestones = 64

// HeaderKind says what a message on jetrun.finish.<handler> carries:
// KindMilestoneNotice for a milestone notice; absent for a finish.
const HeaderKind = "Jetrun-Kind"

// KindMilestoneNotice is the kind of a MilestoneNotice, in its "kind" field
// and its HeaderKind header.
const KindMilestoneNotice = "milestone"

// MilestoneNotice tells a detached run's handler that the run reached a
// milestone listed in detached.onMilestones. It is published to
// jetrun.finish.<handler> (beside the run's finishes) with Nats-Msg-Id
// <runId>.milestone.<name>, which is also the idempotency key handlers
// deduplicate on. Only the first milestone of each listed name is
// announced.
type MilestoneNotice struct {
	// Kind is always KindMilestoneNotice.
	Kind      string    `json:"kind"`
	RunID     string    `json:"runId"`
	Handler   string    `json:"handler"`
	Milestone Milestone `json:"milestone"`
	// Run is the run's row when the notice was published.
	Run json.RawMessage `json:"run,omitempty"`
}

func (d *Detached) validateMilestones() []error {
	if len(d.OnMilestones) == 0 {
		return nil
	}
	var errs []error
	if d.OnFinish == "" {
		errs = append(errs, errors.New(`"detached.onMilestones" needs "detached.onFinish", the handler that hears them`))
	}
	if len(d.OnMilestones) > MaxOnMilestones {
		errs = append(errs, fmt.Errorf(`"detached.onMilestones" lists %d names; the limit is %d`, len(d.OnMilestones), MaxOnMilestones))
	}
	seen := make(map[string]bool, len(d.OnMilestones))
	for i, name := range d.OnMilestones {
		if err := ValidateToken("milestone name", name); err != nil {
			errs = append(errs, fmt.Errorf(`"detached.onMilestones[%d]": %w`, i, err))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf(`"detached.onMilestones[%d]": %q is listed twice`, i, name))
		}
		seen[name] = true
	}
	return errs
}
