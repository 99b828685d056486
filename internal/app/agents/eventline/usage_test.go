package eventline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/pkg/worker"
)

func TestParseUsage(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    worker.Usage
		wantErr string
	}{
		{`{"usage":{"inputTokens":10,"outputTokens":5,"costMicros":7,"model":"m"}}`,
			worker.Usage{InputTokens: 10, OutputTokens: 5, CostMicros: 7, Model: "m"}, ""},
		{`{"usage":{"outputTokens":3}}`, worker.Usage{OutputTokens: 3}, ""},
		{`{"usage":{}}`, worker.Usage{}, ""},
		{`{"usage":null}`, worker.Usage{}, `"usage" must be an object`},
		{`{"usage":{"inputTokens":"many"}}`, worker.Usage{}, `"usage" must be an object`},
		{`{"usage":{"inputTokens":1.5}}`, worker.Usage{}, `"usage" must be an object`},
		{`{"usage":{"costMicros":-1}}`, worker.Usage{}, "must not be negative"},
		{`{"usage":{"model":"` + strings.Repeat("x", 129) + `"}}`, worker.Usage{}, "the limit is 128"},
	} {
		ev, err := eventline.Parse(3, []byte(tc.line))
		if tc.wantErr == "" && (err != nil || ev.Kind != eventline.KindUsage || ev.Usage != tc.want) {
			t.Errorf("%s: %+v %v, want %+v", tc.line, ev.Usage, err, tc.want)
		}
		var fe *eventline.FormatError
		if tc.wantErr != "" && (!errors.As(err, &fe) || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err %v, want %q", tc.line, err, tc.wantErr)
		}
	}
}
