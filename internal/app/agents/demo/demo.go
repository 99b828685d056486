// Package demo is the built-in "demo" agent type: a simulated researcher that
// streams a chunk, reaches a milestone and reports progress at every step.
// Each step's research (its stepMs of waiting) is a durable step "lead-<i>"
// that reports what a model call would have cost (LeadUsage) and stores
// its finding, so a run's trace shows its steps, their durations and its
// usage.
//
// Input: {"steps": n, "stepMs": ms, "failAt": k, "approveAt": a,
// "children": c}, all optional (defaults 5 steps of 200 ms, no failure, no
// approval, no children). With approveAt, the run parks before step a until
// it gets the signal "approve" (a payload {"approved": false, "reason": "…"}
// rejects it). With children, after its steps the run delegates to c nested
// demo runs of 2 steps each, all started by its tool call "delegate"
// (ChildCallID), and awaits them. A run taken over by another worker
// resumes after its last milestone instead of redoing finished steps, and
// re-attaches to the children it started.
package demo

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// AgentType is the name the demo handler is registered under.
const AgentType = "demo"

// Input limits.
const (
	DefaultSteps  = 5
	DefaultStepMs = 200
	MaxSteps      = 100_000
	MaxStepMs     = 10 * 60 * 1000
	MaxChildren   = 20
	ChildSteps    = 2 // steps of each nested run
)

// ChildCallID is the tool call id under which a run starts its children.
const ChildCallID = "delegate"

// LeadUsage is what the research of one step reports, as a model call
// would: tokens and a cost at 3 and 15 millionths a token, on the model
// "demo-sim". It adds up on the run's row and its tree's.
var LeadUsage = worker.Usage{InputTokens: 120, OutputTokens: 30, CostMicros: 120*3 + 30*15, Model: "demo-sim"}

// Finding is the output of a step's research, stored as its durable step.
type Finding struct {
	Lead    int    `json:"lead"`
	Finding string `json:"finding"`
}

// StepName is the name of step i's durable step.
func StepName(i int) string { return "lead-" + strconv.Itoa(i) }

// Input is the demo agent's input.
type Input struct {
	Steps     *int `json:"steps"`
	StepMs    *int `json:"stepMs"`
	FailAt    int  `json:"failAt"`
	ApproveAt int  `json:"approveAt"`
	Children  int  `json:"children"`
}

// Settings is a parsed, checked Input.
type Settings struct {
	Steps, StepMs, FailAt, ApproveAt, Children int
}

// ApprovalSignal is the signal an approval step waits for.
const ApprovalSignal = "approve"

// Output is the demo agent's structured result.
type Output struct {
	Steps        int `json:"steps"`
	StepsRunHere int `json:"stepsRunHere"`
	Attempt      int `json:"attempt"`
	Children     int `json:"children,omitempty"`
}

// ParseInput decodes and checks raw, saying exactly what is wrong.
func ParseInput(raw json.RawMessage) (Settings, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return Settings{}, fmt.Errorf(`demo input must be a JSON object like {"steps": 5, "stepMs": 200}, got %.40s`, raw)
	}
	var in Input
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return Settings{}, fmt.Errorf("demo input field %q must be an integer, got %s", typeErr.Field, typeErr.Value)
		}
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return Settings{}, fmt.Errorf("demo input has unknown field %s; known fields are steps, stepMs, failAt, approveAt and children", field)
		}
		return Settings{}, fmt.Errorf("demo input is not valid JSON: %w", err)
	}
	steps, stepMs := DefaultSteps, DefaultStepMs
	if in.Steps != nil {
		steps = *in.Steps
	}
	if in.StepMs != nil {
		stepMs = *in.StepMs
	}
	var errs []error
	if steps < 1 || steps > MaxSteps {
		errs = append(errs, fmt.Errorf("demo input field \"steps\" must be between 1 and %d, got %d", MaxSteps, steps))
	}
	if stepMs < 0 || stepMs > MaxStepMs {
		errs = append(errs, fmt.Errorf("demo input field \"stepMs\" must be between 0 and %d, got %d", MaxStepMs, stepMs))
	}
	if in.FailAt < 0 {
		errs = append(errs, fmt.Errorf("demo input field \"failAt\" must not be negative, got %d", in.FailAt))
	}
	if in.ApproveAt < 0 {
		errs = append(errs, fmt.Errorf("demo input field \"approveAt\" must not be negative, got %d", in.ApproveAt))
	}
	if in.Children < 0 || in.Children > MaxChildren {
		errs = append(errs, fmt.Errorf("demo input field \"children\" must be between 0 and %d, got %d", MaxChildren, in.Children))
	}
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	return Settings{Steps: steps, StepMs: stepMs, FailAt: in.FailAt, ApproveAt: in.ApproveAt, Children: in.Children}, nil
}

// Handler returns the demo agent's handler.
func Handler() worker.Handler { return worker.HandlerFunc(serve) }

func serve(ctx context.Context, run *worker.Run) (worker.Result, error) {
	in, err := ParseInput(run.Input())
	if err != nil {
		return worker.Result{}, err
	}
	steps, stepMs, failAt := in.Steps, in.StepMs, in.FailAt
	start, approved := 1, false
	for _, m := range run.Milestones() {
		if n, ok := stepOf(m.Name); ok && n >= start {
			start = n + 1
		}
		approved = approved || m.Name == "approved"
	}
	if start > 1 {
		run.Logger().InfoContext(ctx, "resuming after last milestone", "from_step", start)
	}
	ran := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := start; i <= steps; i++ {
		// The research: a durable step, so an attempt that takes the run
		// over after the step was stored gets its finding back at once.
		if _, err := worker.Step(ctx, run, StepName(i), func(ctx context.Context) (Finding, error) {
			if stepMs > 0 {
				timer.Reset(time.Duration(stepMs) * time.Millisecond)
				select {
				case <-ctx.Done():
					return Finding{}, context.Cause(ctx)
				case <-timer.C:
				}
			} else if err := context.Cause(ctx); ctx.Err() != nil {
				return Finding{}, err
			}
			if err := run.Usage(ctx, LeadUsage); err != nil {
				return Finding{}, err
			}
			return Finding{Lead: i, Finding: fmt.Sprintf("lead %d of %d looks promising", i, steps)}, nil
		}); err != nil {
			return worker.Result{}, err
		}
		if i == in.ApproveAt && !approved {
			if err := awaitApproval(ctx, run, i, steps); err != nil {
				return worker.Result{}, err
			}
			approved = true
		}
		if i == failAt {
			return worker.Result{}, fmt.Errorf("step %d failed, as the input's failAt asked", i)
		}
		if err := run.Chunk(ctx, fmt.Sprintf("step %d of %d: looked into lead %d\n", i, steps, i)); err != nil {
			return worker.Result{}, err
		}
		if _, err := run.Milestone(ctx, "step-"+strconv.Itoa(i), map[string]int{"step": i}); err != nil {
			return worker.Result{}, err
		}
		if err := run.Progress(ctx, worker.Progress{
			Fraction: float64(i) / float64(steps),
			Phase:    "researching",
			Message:  fmt.Sprintf("step %d of %d", i, steps),
		}); err != nil {
			return worker.Result{}, err
		}
		ran++
	}
	summary := finished(steps)
	if in.Children > 0 {
		if err := delegate(ctx, run, in); err != nil {
			return worker.Result{}, err
		}
		summary += fmt.Sprintf(" and %d nested runs", in.Children)
	}
	return worker.Result{
		Summary: summary,
		Output:  Output{Steps: steps, StepsRunHere: ran, Attempt: run.Attempt(), Children: in.Children},
	}, nil
}

// delegate starts in.Children nested demo runs under the tool call
// ChildCallID, all at once, and awaits each (parked meanwhile). A failed
// child fails the run.
func delegate(ctx context.Context, run *worker.Run, in Settings) error {
	children := make([]*worker.Child, 0, in.Children)
	for i := range in.Children {
		c, err := run.Spawn(ctx, worker.ChildRequest{
			AgentType: AgentType, CallID: ChildCallID, DisplayOrder: i, Passthrough: true,
			Input: map[string]int{"steps": ChildSteps, "stepMs": in.StepMs},
		})
		if err != nil {
			return fmt.Errorf("start nested run %d: %w", i+1, err)
		}
		children = append(children, c)
	}
	for _, c := range children {
		if _, err := c.Await(ctx); err != nil {
			return fmt.Errorf("nested run %s: %w", c.ID, err)
		}
	}
	return nil
}

// finished is the summary of a run of n steps.
func finished(n int) string {
	if n == 1 {
		return "finished 1 step"
	}
	return fmt.Sprintf("finished %d steps", n)
}

// awaitApproval parks the run until the "approve" signal arrives.
func awaitApproval(ctx context.Context, run *worker.Run, step, steps int) error {
	if err := run.Progress(ctx, worker.Progress{
		Fraction: float64(step-1) / float64(steps),
		Phase:    "waiting for approval",
		Message:  fmt.Sprintf("step %d needs approval: send the %q signal", step, ApprovalSignal),
	}); err != nil {
		return err
	}
	payload, err := run.Wait(ctx, ApprovalSignal, worker.Ask{Kind: events.AskApprove,
		Title: fmt.Sprintf("step %d of %d needs approval", step, steps), Payload: map[string]int{"step": step, "steps": steps}})
	if err != nil {
		return err
	}
	var answer struct {
		Approved *bool  `json:"approved"`
		Reason   string `json:"reason"`
	}
	_ = json.Unmarshal(payload, &answer) // any other payload approves
	if answer.Approved != nil && !*answer.Approved {
		return fmt.Errorf("step %d was not approved: %s", step, cmp.Or(answer.Reason, "no reason given"))
	}
	_, err = run.Milestone(ctx, "approved", json.RawMessage(payload))
	return err
}

func stepOf(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "step-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}
