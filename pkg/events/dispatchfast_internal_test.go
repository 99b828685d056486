package events

import (
	"encoding/json"
	"reflect"
	"testing"
)

var dispatchSeeds = []string{
	`{"runId":"r1","input":1}`,
	`{"runId":"plain-1","input":{"steps":5,"stepMs":100}}`,
	` { "input" : [1, "a\"b", {"c": null}] , "runId" : "x" } `,
	`{"runId":"n1","input":{"q":"<hi>"},"parent":"p1","parentToolCallId":"call_1","displayOrder":2,"depth":1,"root":"p1","tenant":"t","session":"s","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=b","concurrencyKey":"k","strategy":"latest","debounceMs":1500}`,
	`{"runId":"r1","input":null}`, `{"runId":"r\u00e91","input":1}`, `{"RUNID":"r1","input":1}`, `{"runId":"r1","input":1}x`,
	`{"runId":"r1","input":1,"budget":{"tokens":5}}`, `{"depth":-0,"input":"s"}`, `{"depth":01,"input":1}`, `{"depth":1.5,"input":1}`,
	`{"depth":99999999999999999999,"input":1}`, `{}`, `{"input":1,}`, `{"input":tru}`, `{"runId":"a","runId":"b","input":2}`,
	"{\"runId\":\"\xff\",\"input\":1}", `{"input":{"a":[}`, `{"input":"\u2028"}`,
}

// FuzzDecodeDispatchFast: whatever the fast path decodes, json.Unmarshal
// decodes the same, and accepts.
func FuzzDecodeDispatchFast(f *testing.F) {
	for _, s := range dispatchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDispatch(t, data)
	})
}

func TestDecodeDispatchFastDecodesAsUnmarshal(t *testing.T) {
	fast := 0
	for _, s := range dispatchSeeds {
		if checkFastDispatch(t, []byte(s)) {
			fast++
		}
	}
	if fast < 5 {
		t.Errorf("the fast path decoded %d of the seeds; the common dispatches go through it", fast)
	}
}

func checkFastDispatch(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := decodeDispatchFast(data)
	if !ok {
		return false
	}
	var want Dispatch
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%q: the fast path decoded %+v, json.Unmarshal refuses it: %v", data, got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: the fast path decoded %+v, json.Unmarshal %+v", data, got, want)
	}
	return true
}

func BenchmarkDecodeDispatch(b *testing.B) {
	data := []byte(`{"runId":"plain-1234","input":1}`)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			_, _ = decodeDispatchFast(data)
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			var d Dispatch
			_ = json.Unmarshal(data, &d)
		}
	})
}
