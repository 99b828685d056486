package asks

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
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
// scan of run rows, nor of the bucket). Each ask is kept with its JSON,
// encoded once when it changes, and in list order, so a page is read in
// place and written as it is: a request copies only its page. Subscribers
// get every change.
type View struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu sync.Mutex
	// asks holds every ask by id; order holds the same entries in list
	// order (newest first, then by id); counts the number of asks per
	// status.
	asks    map[string]*Entry
	order   []*Entry
	counts  map[string]int
	subs    map[chan Entry]struct{}
	stopped bool

	cancel context.CancelFunc
	done   chan struct{}
}

// Entry is an ask as the view holds it: the ask, and its JSON (compact,
// encoded once when the ask changed). Neither is changed after; callers
// must not change them either.
type Entry struct {
	Ask  *events.Ask
	JSON json.RawMessage
	pos  position
}

// newEntry encodes a.
func newEntry(a *events.Ask) (*Entry, error) {
	data, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("asks: encode ask %s: %w", a.ID, err)
	}
	return &Entry{Ask: a, JSON: data, pos: positionOf(a)}, nil
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
	v := &View{kv: s.kv, log: logger, asks: make(map[string]*Entry), counts: make(map[string]int),
		subs: make(map[chan Entry]struct{}), cancel: cancel, done: make(chan struct{})}
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
	initial := make(map[string]*Entry)
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
			v.load(initial)
			loading = false
			loaded()
			continue
		}
		var entry *Entry
		if e.Operation() == jetstream.KeyValuePut {
			a, err := Decode(e.Value())
			if err == nil {
				entry, err = newEntry(a)
			}
			if err != nil {
				v.log.WarnContext(ctx, "an ask is not valid JSON; not listed", "ask_id", e.Key(), "err", err)
				continue
			}
		}
		if loading {
			if entry != nil {
				initial[e.Key()] = entry
			} else {
				delete(initial, e.Key())
			}
			continue
		}
		v.apply(e.Key(), entry)
	}
}

// load replaces the index with the asks of a (re)loaded watch.
func (v *View) load(initial map[string]*Entry) {
	order := make([]*Entry, 0, len(initial))
	counts := make(map[string]int)
	for _, e := range initial {
		order = append(order, e)
		counts[e.Ask.Status]++
	}
	slices.SortFunc(order, func(a, b *Entry) int { return a.pos.compare(b.pos) })
	v.mu.Lock()
	defer v.mu.Unlock()
	v.asks, v.order, v.counts = initial, order, counts
}

// apply takes in a change (a nil e: the ask was removed).
func (v *View) apply(id string, e *Entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.asks[id]; ok {
		if i, found := v.find(old.pos); found {
			v.order = slices.Delete(v.order, i, i+1)
		}
		v.counts[old.Ask.Status]--
		delete(v.asks, id)
	}
	if e == nil {
		return
	}
	i, _ := v.find(e.pos)
	v.order = slices.Insert(v.order, i, e)
	v.counts[e.Ask.Status]++
	v.asks[id] = e
	for ch := range v.subs {
		select {
		case ch <- *e:
		default: // a slow subscriber misses changes; it re-lists
		}
	}
}

// find returns where p is, or would be, in v.order (v.mu held).
func (v *View) find(p position) (int, bool) {
	return slices.BinarySearchFunc(v.order, p, func(e *Entry, p position) int { return e.pos.compare(p) })
}

// Subscribe returns a channel of every ask that changes from now on, and
// a function ending the subscription. The channel is closed when the view
// stops.
func (v *View) Subscribe() (<-chan Entry, func()) {
	ch := make(chan Entry, 256)
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
	e, ok := v.asks[id]
	if !ok {
		return nil, false
	}
	return e.Ask, true
}

// All returns every ask the view holds, in no order.
func (v *View) All() []*events.Ask {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*events.Ask, 0, len(v.order))
	for _, e := range v.order {
		out = append(out, e.Ask)
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
// at the end) and how many asks the filter selects in all. JSON holds
// each ask's encoding, in the same order.
type Page struct {
	Asks  []*events.Ask
	JSON  []json.RawMessage
	Next  string
	Total int
}

// ErrBadCursor is returned by List for a cursor it did not hand out.
var ErrBadCursor = errors.New("bad cursor")

// List returns the asks passing f, newest first. It reads the index in
// place from the cursor on, and copies only the page.
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
	// Counted by status alone, the total needs no scan; otherwise the
	// scan reads every ask (copying none).
	byStatus := f.AgentType == "" && f.Tree == "" && f.RunID == "" && f.OlderThan <= 0 && f.NewerThan <= 0
	v.mu.Lock()
	defer v.mu.Unlock()
	var page Page
	start := 0
	if after != nil {
		start, _ = v.find(*after)
		if start < len(v.order) && v.order[start].pos == *after {
			start++
		}
	}
	if byStatus {
		page.Total = len(v.asks)
		if f.Status != "" {
			page.Total = v.counts[f.Status]
		}
	} else {
		for _, e := range v.order[:start] {
			if f.Keep(e.Ask, now) {
				page.Total++
			}
		}
	}
	n := cmp.Or(f.Limit, len(v.order))
	page.Asks, page.JSON = make([]*events.Ask, 0, min(n, 64)), make([]json.RawMessage, 0, min(n, 64))
	for _, e := range v.order[start:] {
		if !f.Keep(e.Ask, now) {
			continue
		}
		if !byStatus {
			page.Total++
		}
		switch {
		case len(page.Asks) < n:
			page.Asks, page.JSON = append(page.Asks, e.Ask), append(page.JSON, e.JSON)
		case page.Next == "":
			page.Next = encodeCursor(positionOf(page.Asks[n-1]))
		}
		if byStatus && page.Next != "" {
			break
		}
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
