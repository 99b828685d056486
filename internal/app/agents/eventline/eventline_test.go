package eventline_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/pkg/jetruntype"
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
		{`{"step":{"name":"think-1","usage":[{"inputTokens":3,"model":"m"},{"outputTokens":2,"model":"n"}]}}`, eventline.KindStep, ""},
		{`{"step":{"name":"think-1","usage":[]}}`, eventline.KindStep, ""},
		{`{"step":{"name":"think-1","usage":[{"inputTokens":3},{"inputTokens":-3}]}}`, "", `"step.usage[1]": usage counts must not be negative`},
		{`{"step":{"name":"think-1","usage":"lots"}}`, "", `"step.usage" must be a usage object or an array of them`},
		{`{"usage":{"inputTokens":3,"answeredAtMs":1795000000000}}`, eventline.KindUsage, ""},
		{`{"usage":{"inputTokens":3,"answeredAtMs":-1}}`, "", `"usage": usage answeredAtMs must not be negative`},
		{`{"error":"boom","retryable":true}`, eventline.KindError, ""},
		{`{"reserve":{"inputTokens":400,"outputTokens":200,"costMicros":9}}`, eventline.KindReserve, ""},
		{`{"reserve":null}`, "", `"reserve" must be an object`},
		{`{"reserve":{"inputTokens":-1}}`, "", `"reserve": usage counts must not be negative`},
		{`{"reserve":{}}`, "", `"reserve": a reservation must hold some tokens or cost`},
		{`{"reserve":{"inputTokens":400,"limit":"openai-gpt"}}`, eventline.KindReserve, ""},
		{`{"reserve":{"limit":"openai-gpt"}}`, eventline.KindReserve, ""},
		{`{"reserve":{"inputTokens":4,"limit":"a.*"}}`, "", `"reserve.limit": invalid id: limit name`},
		{`{"reserve":{"costMicros":1000000000001}}`, "", `"reserve": reserve costMicros is 1000000000001; the most`},
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
		{`{"error":"x","retryable":true,"retryAfterMs":6000}`, eventline.KindError, ""},
		{`{"error":"x","retryAfterMs":6000}`, eventline.KindError, ""},
		{`{"error":"x","retryable":true,"retryAfterMs":-1}`, "", `"retryAfterMs" must be a whole number`},
		{`{"error":"x","retryable":true,"retryAfterMs":1.5}`, "", `"retryAfterMs" must be a whole number`},
		{`{"error":"x","retryable":true,"retryAfterMs":"6s"}`, "", `"retryAfterMs" must be a whole number`},
		{`{"error":"x","retryable":false,"retryAfterMs":6000}`, "", `"retryAfterMs" is for a retryable error`},
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

// An error line's retryAfterMs is the RetryAfter delay of the attempt's
// failure (capped at MaxRetryAfter), and makes the error retryable.
func TestErrorLineRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration // -1: not retried
	}{
		{`{"error":"x"}`, -1},
		{`{"error":"x","retryable":true}`, 0},
		{`{"error":"x","retryable":true,"retryAfterMs":6000}`, 6 * time.Second},
		{`{"error":"x","retryAfterMs":250}`, 250 * time.Millisecond},
		{`{"error":"x","retryable":true,"retryAfterMs":99999999999}`, eventline.MaxRetryAfter},
	} {
		ev, err := eventline.Parse(1, []byte(tc.line))
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		var retry *jetruntype.RetryError
		isRetry := errors.As(eventline.Failure(ev), &retry)
		if tc.want < 0 && isRetry || tc.want >= 0 && (!isRetry || retry.Delay != tc.want) {
			t.Errorf("%s: failure %#v; want retried after %s", tc.line, eventline.Failure(ev), tc.want)
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
