//go:build cluster

package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/engine/model"
	"github.com/jetrun/jetrun/internal/engine/runstore"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/parent"
)

// hookCall is one call of the finish webhook.
type hookCall struct {
	key, runID, status string
	at                 time.Time
}

// nemesisHook is the finish webhook "hook": it records every call and
// accepts it.
type nemesisHook struct {
	*httptest.Server
	mu    sync.Mutex
	calls []hookCall
}

func newNemesisHook(t *testing.T) *nemesisHook {
	h := &nemesisHook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := hookCall{key: r.Header.Get("Idempotency-Key"), runID: r.Header.Get("Jetrun-Run-Id"),
			status: r.Header.Get("Jetrun-Status"), at: time.Now()}
		h.mu.Lock()
		h.calls = append(h.calls, c)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *nemesisHook) snapshot() []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookCall(nil), h.calls...)
}

// plan is one top-level run of the load.
type plan struct {
	id   string
	kind string // plain, detached, keyed, nested, stepped
	req  parent.Request
	// budgeted: the tree carries a token budget.
	budgeted bool
	// dispatchErr is the last error of a dispatch that never succeeded.
	dispatchErr error
	// awaited is what an awaiting caller saw (plain runs): the status,
	// or "" while it waits.
	awaited   events.Status
	awaitErrs int
}

// load dispatches runs drawn from its seeded source, keeping inFlight
// top-level runs live.
type load struct {
	t        *testing.T
	client   *parent.Client
	store    *runstore.Store
	rng      *rand.Rand
	inFlight int

	mu       sync.Mutex
	plans    []*plan
	awaiting sync.WaitGroup
	awaitCtx context.Context
	stopWait context.CancelFunc
}

func newLoad(t *testing.T, client *parent.Client, store *runstore.Store, rng *rand.Rand, inFlight int) *load {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	t.Cleanup(cancel)
	return &load{t: t, client: client, store: store, rng: rng, inFlight: inFlight, awaitCtx: ctx, stopWait: cancel}
}

var loadKinds = []string{"plain", "detached", "keyed", "nested", "stepped"}

// draw builds the i-th run. Every draw takes the same values from the
// source in the same order.
func (l *load) draw(i int) *plan {
	var v [16]int
	for j := range v {
		v[j] = l.rng.IntN(1 << 20)
	}
	kind := loadKinds[v[0]%len(loadKinds)]
	p := &plan{id: fmt.Sprintf("nm%05d-%s", i, kind), kind: kind}
	demoRun := func() parent.Request {
		return parent.Request{AgentType: demo.AgentType, RunID: p.id,
			Input: map[string]int{"steps": 3 + v[1]%8, "stepMs": 100 + v[2]%300}}
	}
	detached := &events.Detached{OnFinish: "hook"}
	switch kind {
	case "plain":
		p.req = demoRun()
	case "detached":
		p.req = demoRun()
		p.req.Detached = detached
	case "keyed":
		p.req = demoRun()
		p.req.ConcurrencyKey = fmt.Sprintf("key-%d", v[3]%3)
		p.req.Strategy = events.StrategyQueue
		if v[4]%5 == 0 {
			p.req.ConcurrencyKey = "latest-0"
			p.req.Strategy = events.StrategyLatest
		}
	case "stepped":
		p.req = parent.Request{AgentType: "nm-step", RunID: p.id,
			Input: map[string]int{"steps": 2 + v[1]%7, "stepMs": 100 + v[2]%300, "tokens": int(5 + v[5]%46)}}
	case "nested":
		var total int64 // the tree's tokens when nothing is lost or stopped
		if v[6]%2 == 0 {
			in := map[string]any{"tokens": 5 + v[5]%46, "stepMs": 100 + v[2]%200}
			total += int64(5+v[5]%46) + int64(5+v[5]%46)/5
			var kids []map[string]int
			for k := range 2 + v[7]%2 {
				steps, tokens := 2+(v[8]+k)%3, 5+(v[9]+7*k)%46
				kids = append(kids, map[string]int{"steps": steps, "stepMs": 100 + (v[10]+k*37)%300, "tokens": tokens})
				for s := 1; s <= steps; s++ {
					total += int64(tokens+s) + int64(tokens)/5
				}
			}
			in["children"] = kids
			p.req = parent.Request{AgentType: "nm-nest", RunID: p.id, Input: in}
		} else {
			steps, children := 2+v[1]%3, 1+v[7]%3
			p.req = parent.Request{AgentType: demo.AgentType, RunID: p.id,
				Input: map[string]int{"steps": steps, "stepMs": 100 + v[2]%200, "children": children}}
			total = int64(steps+demo.ChildSteps*children) * demo.LeadUsage.InputTokens
			total += int64(steps+demo.ChildSteps*children) * demo.LeadUsage.OutputTokens
		}
		// Half the trees carry a token budget: tight (stopped part way)
		// or loose (held).
		if v[11]%2 == 0 {
			p.budgeted = true
			limit := total * 2
			if v[12]%2 == 0 {
				limit = total * int64(40+v[13]%50) / 100
			}
			p.req.Budget = &events.TreeBudget{Tokens: limit}
		}
	}
	if (kind == "nested" || kind == "stepped") && v[14]%3 == 0 {
		p.req.Detached = detached
	}
	return p
}

// run dispatches until ctx ends.
func (l *load) run(ctx context.Context) {
	live := map[string]bool{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; {
		for id := range live {
			if l.ended(ctx, id) {
				delete(live, id)
			}
		}
		for len(live) < l.inFlight && ctx.Err() == nil {
			p := l.draw(i)
			i++
			l.mu.Lock()
			l.plans = append(l.plans, p)
			l.mu.Unlock()
			if l.dispatch(ctx, p) {
				live[p.id] = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (l *load) ended(ctx context.Context, id string) bool {
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, _, err := l.store.Get(gctx, id)
	return err == nil && ended(r)
}

// ended reports whether r ended: final, or given up with its child
// stopped.
func ended(r *model.Row) bool {
	return r.Status.Final() || (r.Status == events.StatusInterrupted && !r.ChildStillRunning)
}

// dispatch dispatches p, retrying the same run id while the cluster is
// in a fault (a dispatch is idempotent by run id), and starts its awaiting
// caller if it has one.
func (l *load) dispatch(ctx context.Context, p *plan) bool {
	for try := 0; try < 10; try++ {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		_, err := l.client.Dispatch(dctx, p.req)
		cancel()
		if err == nil {
			p.dispatchErr = nil
			break
		}
		p.dispatchErr = err
		if errors.Is(err, parent.ErrBudgetExceeded) {
			break
		}
		time.Sleep(time.Second) // a fault's pace: the retry of a refused dispatch
	}
	if p.dispatchErr != nil {
		l.t.Logf("nemesis: dispatch %s failed: %v", p.id, p.dispatchErr)
		return false
	}
	if p.kind == "plain" {
		l.awaiting.Go(func() { l.await(p) })
	}
	return true
}

// await waits for p's outcome as a caller would: an error that is not the
// run's outcome (a connection lost in a fault) re-attaches.
func (l *load) await(p *plan) {
	for l.awaitCtx.Err() == nil {
		_, err := l.client.Await(l.awaitCtx, p.id)
		if err == nil {
			l.setAwaited(p, events.StatusCompleted)
			return
		}
		if f := (*parent.Failure)(nil); errors.As(err, &f) && (f.Status.Final() || !f.ChildStillRunning) && f.Reason != events.ReasonNoProgress {
			l.setAwaited(p, f.Status)
			return
		}
		l.mu.Lock()
		p.awaitErrs++
		l.mu.Unlock()
		select {
		case <-l.awaitCtx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (l *load) setAwaited(p *plan, s events.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p.awaited = s
}
