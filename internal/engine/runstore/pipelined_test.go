package runstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// TestLookupManyReadsWhatLookupReads reads 1,000 runs with one batched
// read (some with rows, some never written, some deleted) and gets, for
// each, what Lookup says: its row at its revision, or no row.
func TestLookupManyReadsWhatLookupReads(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	var ids []string
	for i := range 1000 {
		id := fmt.Sprintf("r%d", i)
		ids = append(ids, id)
		if i%3 == 0 {
			continue // never written
		}
		row := newRun(id)
		row.Unindexed = true
		if _, err := s.CreateLater(row)(ctx); err != nil {
			t.Fatal(err)
		}
		if i%3 == 1 && i%7 == 0 {
			if err := s.Delete(ctx, row); err != nil {
				t.Fatal(err)
			}
		}
	}
	found, err := s.LookupMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, id := range ids {
		row, rev, err := s.Lookup(ctx, id)
		got, ok := found[id]
		switch {
		case errors.Is(err, runstore.ErrRunNotFound):
			if ok {
				t.Fatalf("%s: LookupMany found %+v, Lookup none", id, got)
			}
		case err != nil:
			t.Fatal(err)
		case !ok || got.Rev != rev || got.Row.ID != row.ID || got.Row.Status != row.Status:
			t.Fatalf("%s: LookupMany %+v, %v; Lookup %+v at %d", id, got, ok, row, rev)
		default:
			rows++
		}
	}
	if rows == 0 || rows == len(ids) || len(found) != rows {
		t.Fatalf("%d rows of %d ids, %d found", rows, len(ids), len(found))
	}
	none, err := s.LookupMany(ctx, []string{"x1", "x2"})
	if err != nil || len(none) != 0 {
		t.Fatalf("runs never written: %v, %v", none, err)
	}
	if _, err := s.LookupMany(ctx, []string{"bad id"}); err == nil {
		t.Fatal("a bad id read without an error")
	}
}

// TestLookupManyFailsWhereBatchedReadsAreNotAllowed reads rows as a user
// whose batched direct gets the server drops (its permissions allow a
// row's direct get only): LookupMany says it could not read, and Lookup,
// which callers fall back on, reads the row.
func TestLookupManyFailsWhereBatchedReadsAreNotAllowed(t *testing.T) {
	t.Parallel()
	ns := natstest.RunServerWithOptions(t, &server.Options{Users: []*server.User{
		{Username: "admin", Password: "a"},
		{Username: "reader", Password: "r", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.DIRECT.GET.KV_jetrun_runs"}},
		}},
	}})
	connect := func(user, pass string) jetstream.JetStream {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, pass), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := context.Background()
	row := newRun("r1")
	row.Unindexed = true
	if _, err := openStore(t, connect("admin", "a"), 1).CreateLater(row)(ctx); err != nil {
		t.Fatal(err)
	}
	reader := openStore(t, connect("reader", "r"), 1)
	if found, err := reader.LookupMany(ctx, []string{"r1"}); err == nil {
		t.Fatalf("a denied batched read answered %v", found)
	}
	if got, _, err := reader.Lookup(ctx, "r1"); err != nil || got.ID != "r1" {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
}

// TestLookupManyOfLargeRowsIsCutShortAndTriesAgain reads rows whose sum
// passes the batched read's size bound: LookupMany says it could not read
// them all (the caller reads them one by one), and reads again at once.
func TestLookupManyOfLargeRowsIsCutShortAndTriesAgain(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("x", 600<<10) + `"`)
	var ids []string
	for i := range 20 { // 12 MB of rows
		row := newRun(fmt.Sprintf("big%d", i))
		row.Unindexed, row.Input = true, big
		if _, err := s.CreateLater(row)(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, row.ID)
	}
	if found, err := s.LookupMany(ctx, ids); err == nil {
		t.Fatalf("12 MB of rows read in one answer: %d rows", len(found))
	}
	found, err := s.LookupMany(ctx, ids[:3])
	if err != nil || len(found) != 3 {
		t.Fatalf("three of them: %d rows, %v", len(found), err)
	}
}
