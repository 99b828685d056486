package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/internal/testkit/natstest"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetruntype"
)

// A row write in flight holds the row writer's turn, never its lock: while
// one waits in the middle of its compare-and-set, the attempt still reads
// its row, notes progress and hands the heart its pending fields, and a
// second writer waits for its turn only as long as its own context lets
// it. Once the write lands, the writer knows the row it stored.
func TestRowWriterHoldsNoLockAcrossAWrite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := natstest.RunServer(t)
	_, js := natstest.Connect(t, ns)
	store, err := runstore.Open(ctx, js, runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	row := model.NewRun("demo", events.Dispatch{RunID: "rw1"}, 1, time.Now())
	rev, err := store.Create(ctx, row)
	if err != nil {
		t.Fatal(err)
	}
	rw := newRowWriter(store, row, rev)
	rw.startClock(time.Now())

	inWrite, release := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		_, err := rw.write(ctx, func(r *model.Row) error {
			select {
			case <-inWrite:
			default:
				close(inWrite)
			}
			<-release
			r.Summary = "written"
			return nil
		})
		wrote <- err
	}()
	<-inWrite

	if got := rw.row(); got.ID != "rw1" {
		t.Fatalf("row during a write: %+v", got)
	}
	at := time.Now()
	rw.noteSignal(at, &jetruntype.ProgressSnapshot{Fraction: 0.5, At: at})
	if !rw.due(at, 0) {
		t.Fatal("a row with a signal noted is not due for a sync during a write")
	}
	if ev := rw.take(model.Holder{Worker: "w"}); !ev.LastSignalAt.Equal(at) || ev.Progress == nil {
		t.Fatalf("pending fields during a write: %+v", ev)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wcancel()
	if _, err := rw.write(wctx, func(*model.Row) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second write while one is in flight, its context ended: %v, want context.Canceled", err)
	}

	close(release)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := rw.row(); got.Summary != "written" {
		t.Fatalf("row after the write: summary %q, want the written row", got.Summary)
	}
}
