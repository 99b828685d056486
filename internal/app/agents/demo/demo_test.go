package demo_test

import (
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
)

func TestParseInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in                    string
		steps, stepMs, failAt int
		wantErr               string
	}{
		{`{}`, demo.DefaultSteps, demo.DefaultStepMs, 0, ""},
		{`{"steps":3,"stepMs":0,"failAt":2}`, 3, 0, 2, ""},
		{`{"steps":"five"}`, 0, 0, 0, `field "steps" must be an integer, got string`},
		{`{"steps":1.5}`, 0, 0, 0, `field "steps" must be an integer, got number 1.5`},
		{`{"stepMs":true}`, 0, 0, 0, `field "stepMs" must be an integer, got bool`},
		{`{"steps":0}`, 0, 0, 0, `"steps" must be between 1 and`},
		{`{"stepMs":-1}`, 0, 0, 0, `"stepMs" must be between 0 and`},
		{`{"failAt":-2}`, 0, 0, 0, `"failAt" must not be negative`},
		{`{"stpes":3}`, 0, 0, 0, `unknown field "stpes"`},
		{`{"steps":2,"children":3}`, 2, demo.DefaultStepMs, 0, ""},
		{`{"children":21}`, 0, 0, 0, `"children" must be between 0 and 20`},
		{`[3]`, 0, 0, 0, "must be a JSON object"},
		{`"x"`, 0, 0, 0, "must be a JSON object"},
	}
	for _, tt := range tests {
		in, err := demo.ParseInput([]byte(tt.in))
		steps, stepMs, failAt := in.Steps, in.StepMs, in.FailAt
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || steps != tt.steps || stepMs != tt.stepMs || failAt != tt.failAt {
			t.Errorf("%s: %d %d %d %v", tt.in, steps, stepMs, failAt, err)
		}
	}
}
