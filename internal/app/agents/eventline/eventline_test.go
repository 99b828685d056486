package eventline_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		line, kind, wantErr string
	}{
		{`{"chunk":"hi"}`, eventline.KindChunk, ""},
		{`{"chunk":{"a":1},"extra":true}`, eventline.KindChunk, ""},
		{`{"progress":{"fraction":1,"phase":"p"}}`, eventline.KindProgress, ""},
		{`{"milestone":{"name":"m","data":[1]}}`, eventline.KindMilestone, ""},
		{`{"wait":"approve"}`, eventline.KindWait, ""},
		{`{"call":{"name":"ask-user","input":{"q":1}}}`, eventline.KindCall, ""},
		{`{"call":{"name":"ask"}}`, eventline.KindCall, ""},
		{`{"result":{"summary":"s"}}`, eventline.KindResult, ""},
		{`{"step":{"name":"plan-1","output":{"a":1}}}`, eventline.KindStep, ""},
		{`{"step":{"name":"search:tides"}}`, eventline.KindStep, ""},
		{`{"step":"plan"}`, "", `"step" must be an object`},
		{`{"step":null}`, "", `"step" must be an object`},
		{`{"step":{"output":1}}`, "", `"step.name"`},
		{`{"step":{"name":"a b"}}`, "", `"step.name"`},
		{`{"step":{"name":"think-1","output":"x","usage":{"inputTokens":3,"model":"m"}}}`, eventline.KindStep, ""},
		{`{"step":{"name":"think-1","usage":{"inputTokens":-3}}}`, "", `"step.usage"`},
		{`{"error":"boom","retryable":true}`, eventline.KindError, ""},
		{`chunk`, "", "line 7: not a JSON object"},
		{`{"chunk":`, "", "not valid JSON"},
		{`{}`, "", "no event key"},
		{`{"chunk":1,"result":{}}`, "", "more than one event key (chunk, result)"},
		{`{"chunk":null}`, "", "must not be null"},
		{`{"progress":{"fraction":-0.1}}`, "", "between 0 and 1"},
		{`{"milestone":{"data":1}}`, "", `"milestone.name" must be 1 to`},
		{`{"wait":"a.b"}`, "", `"wait"`},
		{`{"wait":3}`, "", "signal name"},
		{`{"call":"ask"}`, "", `"call" must be an object`},
		{`{"call":{"input":1}}`, "", `"call.name"`},
		{`{"call":{"name":"a b"}}`, "", `"call.name"`},
		{`{"error":""}`, "", "non-empty string"},
		{`{"error":"x","retryable":"yes"}`, "", "true or false"},
	} {
		ev, err := eventline.Parse(7, []byte(tc.line))
		if tc.wantErr == "" && (err != nil || ev.Kind != tc.kind) {
			t.Errorf("%s: kind %q err %v, want %s", tc.line, ev.Kind, err, tc.kind)
		}
		var fe *eventline.FormatError
		if tc.wantErr != "" && (!errors.As(err, &fe) || fe.Line != 7 || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err %v, want %q", tc.line, err, tc.wantErr)
		}
	}
}

func TestReaderTakesAPartialLastLineOnlyAtACleanEnd(t *testing.T) {
	r := eventline.NewReader(strings.NewReader("one\r\ntwo\nthree"), 16)
	var got []string
	for {
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(l))
	}
	if strings.Join(got, "|") != "one|two|three" {
		t.Fatalf("lines %q", got)
	}
	r = eventline.NewReader(io.MultiReader(strings.NewReader("ok\npart"), failing{}), 16)
	if l, err := r.Next(); string(l) != "ok" || err != nil {
		t.Fatalf("%q %v", l, err)
	}
	if l, err := r.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("partial line %q taken on a broken stream", l)
	}
	r = eventline.NewReader(strings.NewReader(strings.Repeat("x", 40)+"\n"), 16)
	if _, err := r.Next(); !errors.Is(err, eventline.ErrTooLong) {
		t.Fatalf("err %v, want ErrTooLong", err)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"chunk":"x"}`))
	f.Add([]byte(`{"progress":{"fraction":0.5}}`))
	f.Add([]byte(`{"milestone":{"name":"m"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := eventline.Parse(1, line)
		if err == nil && ev.Kind == "" {
			t.Fatal("no kind and no error")
		}
	})
}
