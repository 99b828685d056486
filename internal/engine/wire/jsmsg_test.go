package wire_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
)

func TestHeaderValue(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain reason", "plain reason"},
		{"héllo ✓", "héllo ✓"},
		{"bad \xff\xfe byte", `bad \xff\xfe byte`},
		{"two\r\nlines\tand\x00nul", `two\r\nlines\tand\x00nul`},
	}
	for _, tc := range tests {
		if got := wire.HeaderValue(tc.in); got != tc.want {
			t.Errorf("HeaderValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := wire.HeaderValue(strings.Repeat("é", 2000))
	if !utf8.ValidString(long) || len(long) > 1100 {
		t.Errorf("a long value: %d bytes, valid UTF-8 %v", len(long), utf8.ValidString(long))
	}
	if got := wire.Truncate("aé", 2); got != "a…" {
		t.Errorf("Truncate cut a rune: %q", got)
	}
}

// A dead letter whose reason carries invalid UTF-8 and line breaks (a
// handler's error, a webhook's answer) is stored by a real server with a
// single, valid Jetrun-Reason header.
func TestDeadLetterReasonIsValidUTF8(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>", "dlq.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("payload")); err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: "s.a"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reason := "handler said: \xff\xfe\r\nInjected: yes"
	if _, err := js.PublishMsg(ctx, wire.DeadLetter("dlq.a", msg, reason)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetLastMsgForSubject(ctx, "dlq.a")
	if err != nil {
		t.Fatal(err)
	}
	r := got.Header.Get(events.HeaderReason)
	if !utf8.ValidString(r) || r != `handler said: \xff\xfe\r\nInjected: yes` || got.Header.Get("Injected") != "" {
		t.Fatalf("stored reason %q (valid UTF-8 %v), headers %v", r, utf8.ValidString(r), got.Header)
	}
}
