package asks_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/jetrun/jetrun/internal/engine/asks"
	"github.com/jetrun/jetrun/pkg/events"
)

// The digest is the payload's, not its spelling: key order and spaces do
// not change it, a value does; big numbers keep their digits.
func TestDigestIsOfTheCanonicalPayload(t *testing.T) {
	a, _ := asks.Digest(json.RawMessage(`{"b": 1, "a": [1, 2]}`))
	b, _ := asks.Digest(json.RawMessage(`{"a":[1,2],"b":1}`))
	c, _ := asks.Digest(json.RawMessage(`{"a":[2,1],"b":1}`))
	if a != b || a == c || len(a) != len("sha256:")+64 {
		t.Fatalf("digests %s %s %s", a, b, c)
	}
	canon, _ := asks.Canonical(json.RawMessage(`{"n": 12345678901234567890}`))
	if string(canon) != `{"n":12345678901234567890}` {
		t.Fatalf("canonical %s", canon)
	}
	if _, err := asks.Digest(json.RawMessage(`{"a":`)); err == nil {
		t.Fatal("a broken payload has a digest")
	}
}

// CheckValue names the field that breaks the ask's kind or schema.
func TestCheckValueNamesTheField(t *testing.T) {
	form := &events.Ask{Kind: events.AskForm, Schema: json.RawMessage(
		`{"type":"object","required":["to"],"properties":{"to":{"type":"string"},"cc":{"type":"array","items":{"type":"string"}}}}`)}
	for _, tc := range []struct {
		ask   *events.Ask
		value string
		field string // "" with ok
		ok    bool
	}{
		{&events.Ask{Kind: events.AskApprove}, `{"approved":false,"comment":"no"}`, "", true},
		{&events.Ask{Kind: events.AskApprove}, `{"approved":1}`, "/approved", false},
		{&events.Ask{Kind: events.AskApprove}, `true`, "", false},
		{&events.Ask{Kind: events.AskChoose, Choices: []string{"a"}}, `{"choice":"a"}`, "", true},
		{&events.Ask{Kind: events.AskChoose, Choices: []string{"a"}}, `{"choice":"b"}`, "/choice", false},
		{form, `{"to":"x","cc":["y"]}`, "", true},
		{form, `{"cc":["y"]}`, "/to", false},
		{form, `{"to":"x","cc":["y",2]}`, "/cc/1", false},
		{&events.Ask{Kind: events.AskForm}, `[1,"any"]`, "", true},
	} {
		_, err := asks.CheckValue(tc.ask, json.RawMessage(tc.value))
		var ve *asks.ValueError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s %s: %v", tc.ask.Kind, tc.value, err)
		case !tc.ok && (!errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, asks.ErrBadValue)):
			t.Errorf("%s %s: %v; want a ValueError naming %q", tc.ask.Kind, tc.value, err, tc.field)
		}
	}
}
