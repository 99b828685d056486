package asks

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/jsfault"
	"github.com/jetrun/jetrun/pkg/events"
)

// View is the index of the asks: every ask in memory, fed by one watch of
// the asks bucket, so listing them costs no request to the server (not a
// scan of run rows, nor of the bucket). Subscribers get every change.
type View struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu      sync.Mutex
	asks    map[string]*events.Ask
	subs    map[chan *events.Ask]struct{}
	stopped bool

	cancel context.CancelFunc
	done   chan struct{}
}

// rewatchPause is the longest pause between two tries to watch the asks.
const rewatchPause = 5 * time.Second

// StartView loads every ask of s (ctx bounds the load) and follows them
// until Stop.
func StartView(ctx context.Context, s *Store, logger *slog.Logger) (*View, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	v := &View{kv: s.kv, log: logger, asks: make(map[string]*events.Ask), subs: make(map[chan *events.Ask]struct{}),
		cancel: cancel, done: make(chan struct{})}
	ready := make(chan error, 1)
	go v.loop(wctx, ready)
	select {
	case err := <-ready:
		if err != nil {
			v.Stop()
			return nil, err
		}
		return v, nil
	case <-ctx.Done():
		v.Stop()
		return nil, fmt.Errorf("asks: load asks: %w", ctx.Err())
	}
}

// Stop ends the watch and closes every subscription. It is idempotent.
func (v *View) Stop() {
	v.cancel()
	<-v.done
}

func (v *View) loop(ctx context.Context, ready chan<- error) {
	defer close(v.done)
	defer func() {
		v.mu.Lock()
		v.stopped = true
		for ch := range v.subs {
			close(ch)
			delete(v.subs, ch)
		}
		v.mu.Unlock()
	}()
	first := true
	bo := jsfault.NewBackOff(rewatchPause)
	for ctx.Err() == nil {
		err := v.watch(ctx, func() {
			if first {
				first = false
				ready <- nil
			}
			bo.Reset()
		})
		if first {
			ready <- fmt.Errorf("asks: watch asks: %w", err)
			return
		}
		if ctx.Err() == nil {
			v.log.WarnContext(ctx, "asks watch ended; reloading", "err", err)
			_ = jsfault.Sleep(ctx, bo.NextBackOff())
		}
	}
}

// watch follows the bucket: the initial state is taken in whole once
// loaded (then loaded is called), changes one by one after.
func (v *View) watch(ctx context.Context, loaded func()) error {
	w, err := v.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	initial := make(map[string]*events.Ask)
	loading := true
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok = <-w.Updates():
		}
		if !ok {
			return errors.New("watch closed")
		}
		if e == nil { // the initial state is complete
			v.mu.Lock()
			v.asks, loading = initial, false
			v.mu.Unlock()
			loaded()
			continue
		}
		var a *events.Ask
		if e.Operation() == jetstream.KeyValuePut {
			if a, err = Decode(e.Value()); err != nil {
				v.log.WarnContext(ctx, "an ask is not valid JSON; not listed", "ask_id", e.Key(), "err", err)
				continue
			}
		}
		if loading {
			if a != nil {
				initial[e.Key()] = a
			} else {
				delete(initial, e.Key())
			}
			continue
		}
		v.apply(e.Key(), a)
	}
}

// apply takes in a change (a nil a: the ask was removed).
func (v *View) apply(id string, a *events.Ask) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if a == nil {
		delete(v.asks, id)
		return
	}
	v.asks[id] = a
	for ch := range v.subs {
		select {
		case ch <- a:
		default: // a slow subscriber misses changes; it re-lists
		}
	}
}

// Subscribe returns a channel of every ask that changes from now on, and
// a function ending the subscription. The channel is closed when the view
// stops.
func (v *View) Subscribe() (<-chan *events.Ask, func()) {
	ch := make(chan *events.Ask, 256)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.stopped {
		close(ch)
		return ch, func() {}
	}
	v.subs[ch] = struct{}{}
	return ch, func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if _, ok := v.subs[ch]; ok {
			delete(v.subs, ch)
			close(ch)
		}
	}
}

// Get returns ask id as the view has it.
func (v *View) Get(id string) (*events.Ask, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	a, ok := v.asks[id]
	return a, ok
}

// All returns every ask the view holds, in no order.
func (v *View) All() []*events.Ask {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*events.Ask, 0, len(v.asks))
	for _, a := range v.asks {
		out = append(out, a)
	}
	return out
}

// Filter selects asks for List. Zero values select everything.
type Filter struct {
	Status    string // open, answered or closed
	AgentType string
	Tree      string
	RunID     string
	// OlderThan and NewerThan bound the ask's age (askedAt) at now.
	OlderThan, NewerThan time.Duration
	Limit                int    // 0: all
	Cursor               string // from an earlier Page's Next
}

// Keep reports whether a passes f (at now).
func (f Filter) Keep(a *events.Ask, now time.Time) bool {
	age := now.Sub(a.AskedAt)
	return (f.Status == "" || a.Status == f.Status) &&
		(f.AgentType == "" || a.AgentType == f.AgentType) &&
		(f.Tree == "" || a.TreeID == f.Tree) &&
		(f.RunID == "" || a.RunID == f.RunID) &&
		(f.OlderThan <= 0 || age >= f.OlderThan) &&
		(f.NewerThan <= 0 || age < f.NewerThan)
}

// Page is a page of asks, newest first, the cursor of the next page (""
// at the end) and how many asks the filter selects in all.
type Page struct {
	Asks  []*events.Ask
	Next  string
	Total int
}

// ErrBadCursor is returned by List for a cursor it did not hand out.
var ErrBadCursor = errors.New("bad cursor")

// List returns the asks passing f, newest first.
func (v *View) List(f Filter) (Page, error) {
	var after *position
	if f.Cursor != "" {
		p, err := decodeCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		after = &p
	}
	now := time.Now()
	v.mu.Lock()
	out := make([]*events.Ask, 0, 64)
	total := 0
	for _, a := range v.asks {
		if !f.Keep(a, now) {
			continue
		}
		total++
		if after == nil || positionOf(a).compare(*after) > 0 {
			out = append(out, a)
		}
	}
	v.mu.Unlock()
	slices.SortFunc(out, func(a, b *events.Ask) int { return positionOf(a).compare(positionOf(b)) })
	page := Page{Asks: out, Total: total}
	if f.Limit > 0 && len(out) > f.Limit {
		page.Asks = out[:f.Limit]
		page.Next = encodeCursor(positionOf(out[f.Limit-1]))
	}
	return page, nil
}

// position orders asks newest first, then by id.
type position struct {
	at int64
	id string
}

func positionOf(a *events.Ask) position { return position{at: a.AskedAt.UnixNano(), id: a.ID} }

// compare is negative when p comes before q in a list.
func (p position) compare(q position) int {
	return cmp.Or(cmp.Compare(q.at, p.at), strings.Compare(p.id, q.id))
}

func encodeCursor(p position) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.at, 10) + " " + p.id))
}

func decodeCursor(c string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return position{}, ErrBadCursor
	}
	at, id, ok := strings.Cut(string(b), " ")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return position{}, ErrBadCursor
	}
	return position{at: n, id: id}, nil
}
