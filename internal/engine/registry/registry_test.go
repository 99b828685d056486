package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetrun/jetrun/internal/engine"
	"github.com/jetrun/jetrun/internal/engine/registry"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/jetruntest"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/jetruntype"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var info = worker.AgentInfo{
	Description:  "Counts the words of a text.",
	InputSchema:  json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"},"lie":{"type":"boolean"}}}`),
	OutputSchema: json.RawMessage(`{"type":"object","required":["words"],"properties":{"words":{"type":"integer"}}}`),
}

// wordcount counts words; with "lie" it returns an output that does not
// match its schema.
func wordcount(_ context.Context, run *worker.Run) (worker.Result, error) {
	var in struct {
		Text string
		Lie  bool
	}
	if err := json.Unmarshal(run.Input(), &in); err != nil {
		return worker.Result{}, err
	}
	if in.Lie {
		return worker.Result{Output: map[string]string{"words": "many"}}, nil
	}
	return worker.Result{Output: map[string]int{"words": len(strings.Fields(in.Text))}}, nil
}

func startWorker(t *testing.T, nc *nats.Conn, id string) *worker.Worker {
	t.Helper()
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	return jetruntest.StartWorker(t, rt, worker.Config{ID: id}, func(w *worker.Worker) {
		w.HandleWith("wordcount", worker.HandlerFunc(wordcount), info)
		w.HandleFunc("plain", func(context.Context, *worker.Run) (worker.Result, error) { return worker.Result{}, nil })
	})
}

func agents(t *testing.T, js jetstream.JetStream) map[string]registry.Agent {
	t.Helper()
	reg, ok, err := registry.Bind(context.Background(), js, "")
	if err != nil || !ok {
		t.Fatalf("bind registry: %v %v", ok, err)
	}
	list, err := reg.Agents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]registry.Agent{}
	for _, a := range list {
		out[a.AgentType] = a
	}
	return out
}

// Workers announce the agent types they serve; the Go parent API refuses
// an input that does not match the schema, a run whose output does not
// match ends "error", and a dispatch published straight to the stream
// with a bad input is dead-lettered with the schema error.
func TestRegistryGoAPIAndPlainNATS(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServer(t)
	nc, js := natstest.Connect(t, ns)
	rt := jetruntest.OpenRuntime(t, nc, jetrun.Config{})
	ctx := context.Background()
	startWorker(t, nc, "w1")
	w2 := startWorker(t, nc, "w2")

	got := agents(t, js)
	wc := got["wordcount"]
	if len(got) != 2 || wc.Workers != 2 || wc.Description != info.Description || got["plain"].Workers != 2 {
		t.Fatalf("agents: %+v", got)
	}
	var schema map[string]any
	if err := json.Unmarshal(wc.InputSchema, &schema); err != nil || schema["required"] == nil {
		t.Fatalf("input schema %s: %v", wc.InputSchema, err)
	}

	client, err := parent.New(rt, parent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A bad input is refused before any row exists.
	_, err = client.Dispatch(ctx, parent.Request{AgentType: "wordcount", RunID: "bad-in", Input: map[string]any{"text": 5}})
	if !errors.Is(err, parent.ErrBadRequest) || !errors.Is(err, registry.ErrSchemaMismatch) || !strings.Contains(err.Error(), "/text") {
		t.Fatalf("dispatch with a bad input: %v", err)
	}
	if ok, err := jetruntest.HasRun(ctx, client, "bad-in"); ok || err != nil {
		t.Fatalf("a refused dispatch left a run: %v %v", ok, err)
	}
	// A good one runs.
	res, err := client.Run(ctx, parent.Request{AgentType: "wordcount", RunID: "good", Input: map[string]any{"text": "a b c"}})
	if err != nil || string(res.Output) != `{"words":3}` {
		t.Fatalf("run: %v %+v", err, res)
	}
	// An output that does not match ends the run "error" with the mismatch.
	_, err = client.Run(ctx, parent.Request{AgentType: "wordcount", RunID: "liar", Input: map[string]any{"text": "a", "lie": true}})
	var f *jetruntype.Failure
	if !errors.As(err, &f) || f.Status != events.StatusError ||
		!strings.Contains(f.Message, "output of agent type wordcount does not match the schema") || !strings.Contains(f.Message, "/words") {
		t.Fatalf("run with a bad output: %v", err)
	}

	// A plain NATS dispatch with a bad input goes to the dead-letter stream.
	if _, err := js.Publish(ctx, "jetrun.dispatch.wordcount", []byte(`{"runId":"plain-bad","input":{"txt":"a"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetrun.dispatch.wordcount", []byte(`{"runId":"plain-good","input":{"text":"x y"}}`)); err != nil {
		t.Fatal(err)
	}
	row := jetruntest.WaitRow(t, engine.From(rt).Store(), "plain-good", 10*time.Second, jetruntest.Final)
	if row.Status != events.StatusCompleted {
		t.Fatalf("plain good: %s %s", row.Status, row.Error)
	}
	natstest.Eventually(t, 10*time.Second, func() bool {
		s, err := js.Stream(ctx, "JETRUN_DLQ")
		return err == nil && s.CachedInfo().State.Msgs == 1
	}, "the bad dispatch was not dead-lettered")
	s, err := js.Stream(ctx, "JETRUN_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "jetrun.dlq.wordcount")
	if err != nil {
		t.Fatal(err)
	}
	if reason := m.Header.Get(events.HeaderReason); !strings.Contains(reason, "input of agent type wordcount does not match the schema") ||
		!strings.Contains(reason, "text") {
		t.Fatalf("dead-letter reason: %q", reason)
	}
	if ok, _ := jetruntest.HasRun(ctx, client, "plain-bad"); ok {
		t.Fatal("a dead-lettered dispatch left a run")
	}

	// A worker that stops withdraws its announcements.
	if err := w2.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := agents(t, js)["wordcount"]; got.Workers != 1 || got.WorkerIDs[0] != "w1" {
		t.Fatalf("after w2 stopped: %+v", got)
	}
}

func TestToolFormats(t *testing.T) {
	t.Parallel()
	list := []registry.Agent{
		{AgentType: "wordcount", Description: "Counts words.", InputSchema: info.InputSchema, OutputSchema: info.OutputSchema, Workers: 1},
		{AgentType: "plain", Workers: 1},
		{AgentType: "shout", Description: "Shouts.", InputSchema: json.RawMessage(`{"type":"string"}`), Workers: 1},
	}
	wrapped := `{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}`
	for _, tc := range []struct{ format, want string }{
		{"openai", `[{"type":"function","function":{"name":"wordcount","description":"Counts words.","parameters":` + string(info.InputSchema) + `}},` +
			`{"type":"function","function":{"name":"plain","description":"Run the jetrun agent plain.","parameters":{"type":"object","additionalProperties":true}}},` +
			`{"type":"function","function":{"name":"shout","description":"Shouts.","parameters":` + wrapped + `}}]`},
		{"anthropic", `[{"name":"wordcount","description":"Counts words.","input_schema":` + string(info.InputSchema) + `},` +
			`{"name":"plain","description":"Run the jetrun agent plain.","input_schema":{"type":"object","additionalProperties":true}},` +
			`{"name":"shout","description":"Shouts.","input_schema":` + wrapped + `}]`},
		{"mcp", `{"tools":[{"name":"wordcount","description":"Counts words.","inputSchema":` + string(info.InputSchema) + `,"outputSchema":` + string(info.OutputSchema) + `},` +
			`{"name":"plain","description":"Run the jetrun agent plain.","inputSchema":{"type":"object","additionalProperties":true}},` +
			`{"name":"shout","description":"Shouts.","inputSchema":` + wrapped + `}]}`},
	} {
		v, err := registry.Tools(list, tc.format)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(v)
		if string(data) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.format, data, tc.want)
		}
	}
	if _, err := registry.Tools(list, "cobol"); !errors.Is(err, registry.ErrUnknownFormat) {
		t.Fatalf("unknown format: %v", err)
	}
}

func TestCompileAndValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schema, value string
		wantErr       error
	}{
		{`{"type":"integer"}`, `5`, nil},
		{`{"type":"integer"}`, `"5"`, registry.ErrSchemaMismatch},
		{`{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"$defs":{"n":{"minimum":3}}}`, `{"a":2}`, registry.ErrSchemaMismatch},
		{`{"$ref":"file:///etc/passwd"}`, ``, registry.ErrBadSchema},
		{`{"$ref":"https://example.com/s.json"}`, ``, registry.ErrBadSchema},
		{`{"type":12}`, ``, registry.ErrBadSchema},
		{`not json`, ``, registry.ErrBadSchema},
	} {
		s, err := registry.Compile(json.RawMessage(tc.schema))
		if tc.value == "" {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("compile %s: %v, want %v", tc.schema, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("compile %s: %v", tc.schema, err)
		}
		if err := s.Validate(json.RawMessage(tc.value)); !errors.Is(err, tc.wantErr) {
			t.Errorf("%s against %s: %v, want %v", tc.value, tc.schema, err, tc.wantErr)
		}
	}
	if s, err := registry.Compile(nil); s != nil || err != nil || s.Validate(json.RawMessage(`1`)) != nil {
		t.Fatal("no schema must accept anything")
	}
}

// A Cache that keeps being asked looks an answer up again in the background
// before it expires: a changed schema is seen before CacheTTL runs out,
// without a dispatch waiting for the registry.
func TestCacheRefreshesAhead(t *testing.T) {
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	reg, err := registry.Open(ctx, js, wire.Namespace(events.Namespace("")), 1)
	if err != nil {
		t.Fatal(err)
	}
	announce := func(schema string) {
		t.Helper()
		a := registry.Announcement{AgentType: "t", Worker: "w1", At: time.Now(), Info: registry.Info{InputSchema: json.RawMessage(schema)}}
		if err := reg.Announce(ctx, a, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	announce(`{"type":"string"}`)
	cache := registry.NewCache(js, wire.Namespace(events.Namespace("")))
	first := time.Now()
	in, _, err := cache.Schemas(ctx, "t")
	if err != nil || in == nil || in.Validate(json.RawMessage(`"x"`)) != nil {
		t.Fatalf("schemas: %v %v", in, err)
	}
	announce(`{"type":"integer"}`)
	natstest.Eventually(t, time.Until(first.Add(registry.CacheTTL)), func() bool {
		in, _, err := cache.Schemas(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		return in.Validate(json.RawMessage(`1`)) == nil // the new schema
	}, "the schema was not refreshed ahead of its expiry")
}
