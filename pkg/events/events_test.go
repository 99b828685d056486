package events_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id      string
		wantErr error
	}{
		{"r1", nil},
		{"A-z_09", nil},
		{strings.Repeat("a", 64), nil},
		{"", events.ErrInvalidID},
		{strings.Repeat("a", 65), events.ErrInvalidID},
		{"a.b", events.ErrInvalidID},
		{"a*", events.ErrInvalidID},
		{">", events.ErrInvalidID},
		{"a b", events.ErrInvalidID},
		{"tab\t", events.ErrInvalidID},
		{"ünï", events.ErrInvalidID},
	}
	for _, tt := range tests {
		if err := events.ValidateID(tt.id); !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("ValidateID(%q) = %v, want %v", tt.id, err, tt.wantErr)
		}
	}
}

func TestDecodeDispatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    string // substring of the error; "" for success
	}{
		{"minimal", `{"input":{}}`, ""},
		{"full", `{"runId":"r1","input":[1],"parent":"p","parentToolCallId":"c","displayOrder":2,"depth":1,"detached":{"onFinish":"h","maxBudgetMs":5}}`, ""},
		{"extra fields are fine", `{"input":1,"somethingNew":true}`, ""},
		{"empty", ``, "empty"},
		{"array", `[{"input":1}]`, "not a JSON object"},
		{"number", `7`, "not a JSON object"},
		{"truncated", `{"input":`, "malformed JSON"},
		{"trailing garbage", `{"input":1} x`, "malformed JSON"},
		{"no input", `{"runId":"r"}`, `"input" is required`},
		{"null input", `{"input":null}`, `"input" is required`},
		{"runId type", `{"runId":1,"input":1}`, `"runId" must be a string`},
		{"runId dot", `{"runId":"a.b","input":1}`, "'.'"},
		{"runId too long", `{"runId":"` + strings.Repeat("x", 65) + `","input":1}`, "65 characters"},
		{"bad parent", `{"parent":"a>","input":1}`, `"parent"`},
		{"negative depth", `{"depth":-1,"input":1}`, `"depth" must not be negative`},
		{"bad handler", `{"detached":{"onFinish":"a b"},"input":1}`, `"detached.onFinish"`},
		{"detached type", `{"detached":"yes","input":1}`, `"detached" must be an object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := events.DecodeDispatch([]byte(tt.payload))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, events.ErrBadDispatch) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrBadDispatch mentioning %q", err, tt.want)
			}
		})
	}
}

func TestNamespaceSubjects(t *testing.T) {
	t.Parallel()
	var ns events.Namespace
	checks := map[string]string{
		ns.DispatchSubject("demo"):            "jetrun.dispatch.demo",
		ns.RunSubject("r1", events.KindChunk): "jetrun.run.r1.chunk",
		ns.RunWildcard("r1"):                  "jetrun.run.r1.>",
		wire.Namespace(ns).DLQSubject("demo"): "jetrun.dlq.demo",
		wire.Namespace(ns).DLQSubject("a.b"):  "jetrun.dlq._invalid",
		wire.Namespace(ns).DispatchStream():   "JETRUN_DISPATCH",
		wire.Namespace(ns).EventsStream():     "JETRUN_EVENTS",
		wire.Namespace(ns).RunsBucket():       "jetrun_runs",
		wire.AgentConsumer("demo"):            "agent-demo",
	}
	for got, want := range checks {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	other, err := events.NewNamespace("acme")
	if err != nil || wire.Namespace(other).DispatchStream() != "ACME_DISPATCH" || other.RunWildcard("x") != "acme.run.x.>" {
		t.Fatalf("acme namespace: %v %q", err, wire.Namespace(other).DispatchStream())
	}
	if _, err := events.NewNamespace("a.b"); err == nil {
		t.Fatal("prefix with a dot accepted")
	}
	if id, kind, err := wire.Namespace(ns).ParseRunSubject("jetrun.run.r1.milestone"); err != nil || id != "r1" || kind != "milestone" {
		t.Fatalf("parse = %q %q %v", id, kind, err)
	}
	if wire.Namespace(ns).AgentTypeFromDispatchSubject("jetrun.dispatch.a.b") != "" || wire.Namespace(ns).AgentTypeFromDispatchSubject("jetrun.dispatch.demo") != "demo" {
		t.Fatal("AgentTypeFromDispatchSubject")
	}
}

func TestSubjectBuildersRefuseInvalidTokens(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"a.b", "*", ">", "", "a b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RunSubject(%q) did not panic", bad)
				}
			}()
			_ = events.Namespace("").RunSubject(bad, events.KindStatus)
		}()
	}
}

func FuzzDecodeDispatch(f *testing.F) {
	for _, s := range []string{`{"input":{}}`, `{"runId":"a.b","input":1}`, `[]`, `{"detached":{"onFinish":"x"},"input":null}`, "\x00", `{"input":"` + strings.Repeat("a", 100) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := events.DecodeDispatch(data)
		if err != nil {
			if !errors.Is(err, events.ErrBadDispatch) {
				t.Fatalf("error %v does not wrap ErrBadDispatch", err)
			}
			return
		}
		if d.RunID != "" {
			if err := events.ValidateID(d.RunID); err != nil {
				t.Fatalf("accepted dispatch with bad run id %q", d.RunID)
			}
			_ = events.Namespace("").RunWildcard(d.RunID) // must not panic
		}
		if len(d.Input) == 0 {
			t.Fatal("accepted dispatch without input")
		}
	})
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"r1", "a.b", "*", ">", "", " ", strings.Repeat("z", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if events.ValidateID(id) != nil {
			return
		}
		if len(id) == 0 || len(id) > events.MaxIDLength || !utf8.ValidString(id) ||
			strings.ContainsAny(id, ".*> \t\r\n") {
			t.Fatalf("accepted %q", id)
		}
		subject := events.Namespace("").RunSubject(id, events.KindChunk)
		if strings.Count(subject, ".") != 3 {
			t.Fatalf("subject %q has extra tokens", subject)
		}
	})
}

// An explicit 0 (or any negative) budget decodes as BudgetNever; an absent
// one stays 0, the default.
func TestDetachedBudgetsZeroMeansNever(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload         string
		wantMax, wantNP int64
	}{
		{`{"input":1,"detached":{"onFinish":"h"}}`, 0, 0},
		{`{"input":1,"detached":{"maxBudgetMs":0,"noProgressBudgetMs":0}}`, events.BudgetNever, events.BudgetNever},
		{`{"input":1,"detached":{"noProgressBudgetMs":0}}`, 0, events.BudgetNever},
		{`{"input":1,"detached":{"maxBudgetMs":-5,"noProgressBudgetMs":-1}}`, events.BudgetNever, events.BudgetNever},
		{`{"input":1,"detached":{"maxBudgetMs":60000,"noProgressBudgetMs":10000}}`, 60000, 10000},
	}
	for _, tt := range tests {
		d, err := events.DecodeDispatch([]byte(tt.payload))
		if err != nil {
			t.Fatalf("%s: %v", tt.payload, err)
		}
		if d.Detached.MaxBudgetMs != tt.wantMax || d.Detached.NoProgressBudgetMs != tt.wantNP {
			t.Errorf("%s: %+v", tt.payload, d.Detached)
		}
	}
	_, err := events.DecodeDispatch([]byte(`{"input":1,"detached":{"maxBudgetMs":"soon"}}`))
	if !errors.Is(err, events.ErrBadDispatch) || !strings.Contains(err.Error(), `"detached.maxBudgetMs" must be an integer`) {
		t.Fatalf("a string budget: %v", err)
	}
}
