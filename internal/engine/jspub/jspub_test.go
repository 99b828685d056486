package jspub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jspub"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// decodeLikeJetStream is how jetstream.PublishMsg reads an answer.
func decodeLikeJetStream(data []byte) (*jetstream.PubAck, *jetstream.APIError, bool) {
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil || (resp.Error == nil && (resp.PubAck == nil || resp.PubAck.Stream == "")) {
		return nil, nil, false
	}
	return resp.PubAck, resp.Error, true
}

func TestDecodeAckReadsWhatEncodingJSONReads(t *testing.T) {
	answers := []string{
		`{"stream":"KV_jetrun_runs","seq":42}`,
		`{"stream":"JETRUN_EVENTS","seq":18446744073709551615,"duplicate":true}`,
		` { "stream" : "S" , "seq" : 7 , "domain" : "hub" , "duplicate" : false } `,
		`{"stream":"S","seq":3,"val":"10"}`,
		`{"stream":"S\u0041","seq":1}`,        // an escape: decoded in full
		`{"stream":"S","seq":1,"batch":"b1"}`, // a field scan does not know
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`,
		`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`,
		`{"stream":"S"}`,
		`{"stream":"","seq":1}`,
		`{"seq":1}`,
		`{"stream":"S","seq":-1}`,
		`{"stream":"S","seq":1,}`,
		`{"stream":"S" "seq":1}`,
		`{}`, `[]`, ``, `null`, `{"stream":"S","seq":1`, `not json`,
	}
	for _, a := range answers {
		want, wantErr, valid := decodeLikeJetStream([]byte(a))
		got, err := jspub.DecodeAck([]byte(a))
		switch {
		case !valid:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("%q: got %+v, %v; want ErrInvalidJSAck", a, got, err)
			}
		case wantErr != nil:
			var apiErr *jetstream.APIError
			if !errors.As(err, &apiErr) || *apiErr != *wantErr {
				t.Errorf("%q: got %+v, %v; want API error %+v", a, got, err, wantErr)
			}
		case err != nil || !reflect.DeepEqual(got, want):
			t.Errorf("%q: got %+v, %v; want %+v", a, got, err, want)
		}
	}
}

func TestPublishAnswersAsJetStreamDoes(t *testing.T) {
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	msg := func(subject, msgID string, expectSeq string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = []byte("x")
		if msgID != "" {
			m.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		if expectSeq != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expectSeq)
		}
		return m
	}

	pub, err := jspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ack, err := pub.Publish(ctx, msg("s.a", "one", "0"))
	if err != nil || ack.Stream != "S" || ack.Sequence != 1 || ack.Duplicate {
		t.Fatalf("first publish: %+v, %v", ack, err)
	}
	ack, err = pub.Publish(ctx, msg("s.a", "one", ""))
	if err != nil || ack.Sequence != 1 || !ack.Duplicate {
		t.Fatalf("same Nats-Msg-Id again: %+v, %v; want a duplicate of 1", ack, err)
	}
	// A compare-and-set that lost: the error jetstream gives, so
	// errors.Is and the callers' checks work on it.
	_, err = pub.Publish(ctx, msg("s.a", "", "0"))
	_, jsErr := js.PublishMsg(ctx, msg("s.a", "", "0"))
	if !wire.IsWrongLastSequence(err) || !errors.Is(err, jetstream.ErrKeyExists) || err.Error() != jsErr.Error() {
		t.Fatalf("stale expected sequence: %v; jetstream says %v", err, jsErr)
	}
	if _, err := pub.Publish(ctx, msg("nostream.a", "", "")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("subject of no stream: %v; want ErrNoStreamResponse", err)
	}
}

// A stream that answers nothing at all (one without a leader does that)
// does not hold a publish whose context has no deadline for ever: it gets
// the JetStream context's default timeout, as js.PublishMsg does.
func TestPublishWithoutDeadlineGetsTheDefaultTimeout(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, ns)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	silent, err := nc.Subscribe("silent.>", func(*nats.Msg) {}) // there, so no "no responders"; never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	pub, err := jspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	done := make(chan error, 1)
	go func() {
		_, err := pub.Publish(context.Background(), nats.NewMsg("silent.x"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			t.Fatalf("publish nobody answers: %v; want a timeout", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a publish nobody answers, without a deadline, did not end")
	}
}

// Each of many publishes in flight at once gets its own stream's answer:
// the sequence the stream stored its message under.
func TestConcurrentPublishesGetTheirOwnAnswers(t *testing.T) {
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const publishers, each = 64, 50
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for i := range each {
				m := nats.NewMsg(fmt.Sprintf("s.%d", g))
				m.Data = fmt.Appendf(nil, "%d-%d", g, i)
				ack, err := pub.Publish(ctx, m)
				if err != nil {
					t.Error(err)
					return
				}
				stored, err := s.GetMsg(ctx, ack.Sequence)
				if err != nil || string(stored.Data) != string(m.Data) {
					t.Errorf("publish %s answered sequence %d, which holds %q (%v)", m.Data, ack.Sequence, stored.Data, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A request waiting for an answer when the connection closes ends at once,
// not at its deadline.
func TestRequestEndsWhenTheConnectionCloses(t *testing.T) {
	ns := natstest.RunServer(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jspub.New(js)
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{})
	if _, err := nc.Subscribe("silent", func(*nats.Msg) { close(asked) }); err != nil { // never answers
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_, err := pub.Request(ctx, nats.NewMsg("silent"))
		done <- err
	}()
	<-asked
	nc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("request when its connection closed: %v; want ErrConnectionClosed", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a request whose connection closed waited on")
	}
}
