package jetruntype

// Fork is where a re-run came from (its row's "forkedFrom"): the run it
// re-ran, the step it re-ran from, and the steps it was given back stored
// (their outputs copied from that run, or overridden, never executed nor
// charged again), in that run's stored order.
type Fork struct {
	// RunID is the run re-run; it is never changed by the re-run.
	RunID string `json:"runId"`
	// Step is the step the re-run executes from; empty for a retry that
	// was given every step the run stored.
	Step string `json:"step,omitempty"`
	// Given names the steps given back stored, the first MaxForkGiven of
	// them (every row write carries it); GivenCount counts them all.
	// Overridden names those whose output the re-run's caller replaced.
	Given      []string `json:"given,omitempty"`
	GivenCount int      `json:"givenCount,omitempty"`
	Overridden []string `json:"overridden,omitempty"`
}

// MaxForkGiven bounds the step names a re-run's row lists in
// Fork.Given: a run of thousands of steps re-run from its last would
// otherwise carry them all in each write of its row.
const MaxForkGiven = 100
