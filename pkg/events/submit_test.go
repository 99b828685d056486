package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetrun/jetrun/pkg/events"
)

func TestDecodeKeyedDispatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    string // substring of the error; "" for success
	}{
		{"key alone means queue", `{"input":1,"concurrencyKey":"chat-1"}`, ""},
		{"every strategy", `{"input":1,"concurrencyKey":"c","strategy":"merge"}`, ""},
		{"debounce window", `{"input":1,"concurrencyKey":"c","strategy":"debounce","debounceMs":200}`, ""},
		{"strategy without key", `{"input":1,"strategy":"latest"}`, `"strategy" needs a "concurrencyKey"`},
		{"window without key", `{"input":1,"debounceMs":5}`, `"debounceMs" needs a "concurrencyKey"`},
		{"unknown strategy", `{"input":1,"concurrencyKey":"c","strategy":"newest"}`, `"newest" is not one of`},
		{"window on another strategy", `{"input":1,"concurrencyKey":"c","strategy":"queue","debounceMs":5}`, `applies only to strategy "debounce"`},
		{"negative window", `{"input":1,"concurrencyKey":"c","strategy":"debounce","debounceMs":-1}`, `"debounceMs" must be between`},
		{"window too long", `{"input":1,"concurrencyKey":"c","strategy":"debounce","debounceMs":3600001}`, `"debounceMs" must be between`},
		{"key with a dot", `{"input":1,"concurrencyKey":"a.b"}`, `"concurrencyKey"`},
		{"key with a wildcard", `{"input":1,"concurrencyKey":"a>"}`, `"concurrencyKey"`},
		{"key type", `{"input":1,"concurrencyKey":7}`, `"concurrencyKey" must be a string`},
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
