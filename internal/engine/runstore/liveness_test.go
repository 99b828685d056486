package runstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A worker that resumes its epoch while its key still holds it (a lapse
// whose key had not expired yet, or had expired on a new leader that did
// not remove it yet) extends the key by a whole TTL: the key does not
// expire moments after the resume, which would make the worker lapse a
// second time and stop the attempts it claimed meanwhile (issue 23, item 5:
// runs handed off twice for one fault).
func TestResumeExtendsAKeyStillHoldingItsEpoch(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t))
	s := openStore(t, js, 1)
	ctx := context.Background()
	const ttl = 2 * time.Second
	acquired := time.Now()
	l, err := s.Workers().Acquire(ctx, "w1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Late in the key's life, the worker resumes.
	<-time.After(time.Until(acquired.Add(ttl - 500*time.Millisecond)))
	if err := l.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// Past the TTL the key had before the resume, it is still there.
	<-time.After(time.Until(acquired.Add(ttl + time.Second)))
	if alive, err := s.Workers().Alive(ctx, "w1", l.Epoch()); !alive || err != nil {
		t.Fatalf("a TTL after the key was written and after a resume: alive %v (%v); want the resume to extend it", alive, err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after the resume: %v", err)
	}
}
