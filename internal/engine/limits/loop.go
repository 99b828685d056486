package limits

import (
	"context"
	"errors"
	"time"
)

// loop serves waiting reservations, leases slices from the pools and
// renews this worker's holdings until ctx ends.
func (l *Limiter) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := l.step(ctx)
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-timer.C:
		}
	}
}

// step does one round over the limits and returns when it wants to run
// again at the latest.
func (l *Limiter) step(ctx context.Context) time.Time {
	now := time.Now()
	next := now.Add(l.cfg.Lease / 3)
	l.mu.Lock()
	locs := make([]*local, 0, len(l.limits))
	for _, loc := range l.limits {
		locs = append(locs, loc)
	}
	l.mu.Unlock()
	for _, loc := range locs {
		l.mu.Lock()
		l.serveLocked(loc, now)
		// Blocked, a worker still takes (or gives back) what settles and
		// releases returned to its slice since: otherwise the returns of
		// the calls in flight lie idle till the window rolls.
		take := loc.q.len() > 0 && !now.Before(loc.pausedUntil) && (!now.Before(loc.blockedUntil) || loc.remnantLocked())
		idleFor := now.Sub(loc.idleSince)
		give := loc.q.len() == 0 && loc.othersWaiting && (loc.idleLocked() || loc.reportedWaiting > 0) && idleFor >= idleGrace(loc.spec)
		renew := loc.held && !now.Before(loc.renewAt) || loc.reportDueLocked(now) || loc.debtLocked()
		l.mu.Unlock()
		if take || give || renew {
			if err := l.sync(ctx, loc, take); err != nil && ctx.Err() == nil {
				l.log.WarnContext(ctx, "limits: lease from pool", "limit", loc.name, "error", err)
				next = minTime(next, now.Add(100*time.Millisecond))
			}
		}
		l.mu.Lock()
		l.serveLocked(loc, time.Now())
		if loc.q.len() > 0 {
			at := windowEnd(loc.window, loc.spec)
			if time.Now().Before(loc.pausedUntil) {
				at = loc.pausedUntil
			} else if !loc.blockedUntil.IsZero() {
				at = minTime(at, loc.blockedUntil)
			}
			next = minTime(next, at)
		}
		if loc.held {
			next = minTime(next, loc.renewAt)
		}
		if len(loc.open) > 0 {
			next = minTime(next, windowEnd(loc.window, loc.spec)) // carry what is open
		}
		if loc.granted != loc.reportedGranted {
			next = minTime(next, loc.reportedAt.Add(reportEvery))
		}
		if loc.q.len() == 0 && loc.othersWaiting && (loc.idleLocked() || loc.reportedWaiting > 0) {
			next = minTime(next, loc.idleSince.Add(idleGrace(loc.spec)))
		}
		l.mu.Unlock()
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// reportEvery is how often at most a worker writes its figures (grants,
// tokens, tenants) to a pool when nothing else makes it write: what
// /metrics, jetrun limits and the UI show is at most this old.
const reportEvery = time.Second

// reportDueLocked reports whether loc has grants the pool has not seen and
// its last report is reportEvery old.
func (loc *local) reportDueLocked(now time.Time) bool {
	return loc.granted != loc.reportedGranted && !now.Before(loc.reportedAt.Add(reportEvery))
}

// idleGrace is how long a worker keeps an idle slice while others wait:
// its next reservation is usually a moment away (a run between two calls),
// and giving the slice back only to take it again costs two
// compare-and-sets.
func idleGrace(spec Spec) time.Duration { return min(spec.Window()/20, 50*time.Millisecond) }

// idleLocked reports whether loc holds anything no reservation uses.
func (loc *local) idleLocked() bool {
	return loc.reqLeft > 0 || loc.tokLeft > 0 || loc.concHeld > loc.concUsed
}

// rollLocked starts window w of loc when now is past its window.
func (loc *local) rollLocked(now time.Time) {
	w := windowOf(now, loc.spec)
	if w == loc.window {
		return
	}
	last := loc.window
	loc.window = w
	loc.reqLeft, loc.tokLeft, loc.reqLeased, loc.tokLeased = 0, 0, 0, 0
	loc.used = Totals{Window: w}
	loc.blockedUntil = time.Time{}
	if w == last+1 {
		loc.carryLocked(last)
	}
}

// carryEdge is the end part of a window whose grants, still open when the
// window rolls, are counted in the next window too: their calls may reach
// the provider after the roll, where the provider counts them (a fixed
// window's edge), so the fleet must not lease that part of the next
// window again. A call answered before the roll was counted in the window
// it was granted in: a settle that says when its call was answered
// (Grant.SettleAnswered) gives the carry back to the new window. A grant
// older than this has made its call.
func carryEdge(spec Spec) time.Duration { return spec.Window() / 10 }

// carryLocked charges the grants of window last still open and granted in
// its last carryEdge to the new window: the slice starts in debt, which
// the next compare-and-set leases from the pool, and their settle or
// release returns what they did not use to the new window.
func (loc *local) carryLocked(last int64) {
	edge := windowEnd(last, loc.spec).Add(-carryEdge(loc.spec))
	for g := range loc.open {
		if g.window != last || g.at.Before(edge) {
			continue
		}
		g.window, g.carried = loc.window, true
		loc.reqLeft--
		loc.tokLeft -= g.tokens
		loc.used.Requests++
		loc.used.Tokens += g.tokens
	}
	if loc.spec.Requests == 0 {
		loc.reqLeft = 0
	}
	if loc.spec.Tokens == 0 {
		loc.tokLeft = 0
	}
}

// uncarryLocked gives back to the window what g was charged in it: the
// carry of a call the provider counted in the window before, or a grant
// released unused.
func (loc *local) uncarryLocked(g *Grant) {
	loc.reqLeft++
	loc.tokLeft += g.tokens
	loc.used.Requests--
	loc.used.Tokens -= g.tokens
}

// clockSlack is how long before a roll a carried grant's call must have
// been answered to be taken as counted by the provider in the window
// before: room for the difference between the reporter's clock and this
// worker's (an http child may run on another host).
func clockSlack(spec Spec) time.Duration { return carryEdge(spec) / 10 }

// answeredBefore reports whether a call answered at answered (zero: not
// known) was counted by the provider before window w began.
func answeredBefore(answered time.Time, w int64, spec Spec) bool {
	return !answered.IsZero() && answered.Before(windowEnd(w-1, spec).Add(-clockSlack(spec)))
}

// remnantLocked reports whether the slice has requests or tokens of a
// limited dimension left.
func (loc *local) remnantLocked() bool {
	return loc.spec.Requests > 0 && loc.reqLeft > 0 || loc.spec.Tokens > 0 && loc.tokLeft > 0
}

// debtLocked reports whether the slice owes the pool carried grants.
func (loc *local) debtLocked() bool {
	return loc.spec.Requests > 0 && loc.reqLeft < 0 || loc.spec.Tokens > 0 && loc.tokLeft < 0
}

// fitsLocked reports whether the slice has room for a reservation of
// tokens.
func (loc *local) fitsLocked(tokens int64) bool {
	s := loc.spec
	return (s.Requests == 0 || loc.reqLeft >= 1) &&
		(s.Tokens == 0 || loc.tokLeft >= tokens) &&
		(s.Concurrent == 0 || loc.concHeld-loc.concUsed >= 1)
}

// serveLocked grants waiting reservations, fairly, while the slice has
// room.
func (l *Limiter) serveLocked(loc *local, now time.Time) {
	loc.rollLocked(now)
	if now.Before(loc.pausedUntil) {
		return
	}
	defer func() {
		if loc.q.len() > 0 {
			loc.idleSince = time.Time{}
		} else if loc.idleSince.IsZero() {
			loc.idleSince = now
		}
	}()
	for {
		w := loc.q.head()
		if w == nil || !loc.fitsLocked(w.tokens) {
			return
		}
		weight := localWeight(loc.spec, w.tenant, loc.q.count(w.tenant)+loc.openOf(w.tenant), loc.others[w.tenant])
		loc.q.pop(w, grantCost(loc.spec, w.tokens), weight)
		loc.reqLeft--
		loc.tokLeft -= w.tokens
		loc.concUsed++
		loc.granted++
		l.counts.Granted.Add(1)
		loc.used.Requests++
		loc.used.Tokens += w.tokens
		if loc.used.Tenants == nil {
			loc.used.Tenants = map[string]int64{}
		}
		loc.used.Tenants[w.tenant]++
		g := &Grant{l: l, loc: loc, window: loc.window, tokens: w.tokens, tenant: w.tenant, pauses: loc.pauses, at: now, weight: weight}
		if loc.open == nil {
			loc.open = map[*Grant]struct{}{}
		}
		loc.open[g] = struct{}{}
		w.ch <- result{g: g}
	}
}

// snapshot is what sync needs of a local state, read under the lock.
type snapshot struct {
	spec               Spec
	window             int64
	reqLeft, tokLeft   int64
	concHeld, concUsed int64
	waiting, needTok   int64
	tenants            map[string]int64 // waiting per tenant
	demand             int64            // tokens waiting
	late               bool             // in the last quarter of the window
	fits               bool             // the head fits the slice: no take needed
	used               Totals
	granted            int64
}

func (l *Limiter) snap(loc *local) snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := snapshot{
		spec: loc.spec, window: loc.window, reqLeft: loc.reqLeft, tokLeft: loc.tokLeft,
		concHeld: loc.concHeld, concUsed: loc.concUsed, waiting: int64(loc.q.len()), granted: loc.granted,
		used: Totals{Window: loc.used.Window, Requests: loc.used.Requests, Tokens: loc.used.Tokens},
	}
	if len(loc.used.Tenants) > 0 {
		s.used.Tenants = make(map[string]int64, len(loc.used.Tenants))
		for k, v := range loc.used.Tenants {
			s.used.Tenants[k] = v
		}
	}
	s.tenants, s.demand = loc.q.demand()
	if s.tenants != nil {
		// A reservation in flight comes back soon: a tenant's part is
		// its waiting and open reservations, steadier than waiting alone.
		for g := range loc.open {
			s.tenants[g.tenant]++
		}
	}
	if w := loc.q.head(); w != nil {
		s.needTok = w.tokens
		s.fits = loc.fitsLocked(w.tokens)
	}
	return s
}

// maxCAS bounds the compare-and-set retries of one sync.
const maxCAS = 64

// sync does one compare-and-set on the pool of loc: it takes a slice
// when take (and the head does not fit), gives back what is idle when no
// one here waits, renews the lease and reports this worker's figures.
func (l *Limiter) sync(ctx context.Context, loc *local, take bool) error {
	for range maxCAS {
		p, rev, err := l.cfg.Store.pool(ctx, loc.name)
		if err != nil {
			return err
		}
		l.counts.Reads.Add(1)
		now := time.Now()
		s := l.snap(loc)
		w := windowOf(now, s.spec)
		s.late = !now.Before(lateFrom(w, s.spec))
		if s.window != w { // the local window is behind: its slice is gone
			s.reqLeft, s.tokLeft, s.used = 0, 0, Totals{Window: w}
		}
		changed := p.roll(w, s.spec)
		changed = p.expire(now, l.cfg.Worker) || changed
		l.mu.Lock()
		loc.seeOthersLocked(&p, l.cfg.Worker, now)
		l.mu.Unlock()
		me := p.Holders[l.cfg.Worker]
		staleWait := s.waiting > 0 && me.Seen < w // the fleet's shares need this window's report
		d := p.delta(s, me, take, l.cfg.Worker)
		stuck := take && !s.fits && (d.none() || d.blocked)
		if stuck {
			// No room: report waiting (once), look again when the pool
			// changes, a holder lapses or the window rolls.
			l.block(loc, p, now, w)
		}
		me.Requests += d.req
		me.Tokens += d.tok
		me.Concurrent = s.concHeld + d.conc
		p.Requests += d.req
		p.Tokens += d.tok
		me.UntilMs = now.Add(l.cfg.Lease).UnixMilli()
		me.Used, me.InUse, me.Waiting, me.Granted = s.used, s.concUsed, s.waiting, s.granted
		me.Tenants, me.Demand, me.Seen = s.tenants, s.demand, w
		_, had := p.Holders[l.cfg.Worker]
		keep := me.Concurrent > 0 || me.Requests > 0 || me.Tokens > 0 || me.Waiting > 0 || me.Used.Requests > 0
		if p.Holders == nil {
			p.Holders = map[string]Holder{}
		}
		if keep {
			p.Holders[l.cfg.Worker] = me
		} else {
			delete(p.Holders, l.cfg.Worker)
		}
		l.mu.Lock()
		renewDue := loc.held && !now.Before(loc.renewAt) || loc.reportDueLocked(now)
		// Blocked: tell the others, once a window; not waiting any more:
		// drop the claim.
		waitNews := stuck && (loc.reportedWaiting == 0 || staleWait) || s.waiting == 0 && loc.reportedWaiting > 0
		l.mu.Unlock()
		if !changed && d.none() && !renewDue && !waitNews && had == keep {
			return nil
		}
		err = l.cfg.Store.writePool(ctx, loc.name, p, rev)
		if errors.Is(err, errConflict) {
			l.counts.Conflicts.Add(1)
			continue
		}
		if err != nil {
			return err
		}
		l.counts.Writes.Add(1)
		l.mu.Lock()
		loc.rollLocked(now)
		if loc.window == w {
			loc.reqLeft += d.req
			loc.tokLeft += d.tok
			loc.reqLeased += d.req
			loc.tokLeased += d.tok
		}
		loc.concHeld += d.conc
		loc.held = keep
		loc.reportedWaiting = s.waiting
		loc.reportedGranted, loc.reportedAt = s.granted, now
		loc.renewAt = now.Add(l.cfg.Lease / 3)
		l.mu.Unlock()
		return nil
	}
	return errors.New("limits: too many compare-and-set conflicts on the pool")
}

// block marks loc as having found no room in p until something changes:
// the pool, a holder's lease, the window, or the start of the window's
// last quarter, where the others' claims stop holding room back (a
// claimant that does not take its part, such as a worker that died
// waiting, does not keep the rest of the fleet off it till the roll).
func (l *Limiter) block(loc *local, p Pool, now time.Time, w int64) {
	until := windowEnd(w, loc.spec)
	if late := lateFrom(w, loc.spec); now.Before(late) {
		until = late
	}
	for id, h := range p.Holders {
		if id != l.cfg.Worker && h.Concurrent > 0 {
			until = minTime(until, time.UnixMilli(h.UntilMs+1))
		}
	}
	l.mu.Lock()
	loc.blockedUntil = until
	l.mu.Unlock()
}

// lateFrom is when window w's last quarter starts: from then on the
// claims of the fleet's shares hold nothing back (Pool.delta).
func lateFrom(w int64, spec Spec) time.Time { return windowEnd(w, spec).Add(-spec.Window() / 4) }

// delta is what one sync moves between the pool and a worker's slice
// (negative: given back).
type delta struct {
	req, tok, conc int64
	blocked        bool // the head does not fit and the pool has no room for it
}

func (d delta) none() bool { return d.req == 0 && d.tok == 0 && d.conc == 0 }

// delta computes the slice to take (take, and the head does not fit) or
// to give back (no one waits here). A slice is a share of the limit split
// among the workers that wait, at least what the head needs, at most what
// the other holders' fair claims leave (fair.go); all dimensions or none,
// so a worker never sits on requests it cannot use for want of tokens.
func (p *Pool) delta(s snapshot, me Holder, take bool, self string) delta {
	spec := s.spec
	// First lease what carried grants owe (carryLocked), as far as the
	// pool has it, before any claim or slice: their calls may be counted
	// by the provider in this window.
	var debt delta
	if spec.Requests > 0 && s.reqLeft < 0 {
		debt.req = min(-s.reqLeft, max(spec.Requests-p.Requests, 0))
	}
	if spec.Tokens > 0 && s.tokLeft < 0 {
		debt.tok = min(-s.tokLeft, max(spec.Tokens-p.Tokens, 0))
	}
	if !debt.none() {
		return debt
	}
	if s.waiting == 0 {
		// Give back what is idle: the window's unused slice and free slots.
		return delta{req: -max(s.reqLeft, 0), tok: -max(s.tokLeft, 0), conc: -(s.concHeld - s.concUsed)}
	}
	if !take {
		return delta{}
	}
	live := int64(1)
	var held int64
	for id, h := range p.Holders {
		held += h.Concurrent
		if id != self && h.Waiting > 0 {
			live++
		}
	}
	held -= me.Concurrent
	parts, _ := fleetShares(p, spec, self, s.tenants)
	others, mine := p.claims(spec, self, parts, me)
	if s.late {
		// The window's last quarter: claims no longer hold room back. A
		// claimant whose runs ask more slowly than its part would leave
		// the rest idle till the roll.
		others = [2]float64{}
	}
	var d delta
	if spec.Requests > 0 && s.reqLeft < 1 {
		remaining := spec.Requests - p.Requests
		if d.req = share(spec.Requests, allowed(remaining, others[0], mine[0]), remaining, 1-s.reqLeft, live, mine[0] > 0); d.req == 0 {
			return delta{tok: -max(s.tokLeft, 0), blocked: true}
		}
	}
	if spec.Tokens > 0 && s.tokLeft < s.needTok {
		remaining := spec.Tokens - p.Tokens
		if d.tok = share(spec.Tokens, allowed(remaining, others[1], mine[1]), remaining, s.needTok-s.tokLeft, live, mine[1] > 0); d.tok == 0 {
			// No room: give the remnant too small for the head back, so
			// that the remnants of several workers can serve one of them
			// instead of lying idle till the window rolls (requests too:
			// all dimensions or none).
			return delta{req: -max(s.reqLeft, 0), tok: -max(s.tokLeft, 0), blocked: true}
		}
	}
	if spec.Concurrent > 0 && s.concHeld-s.concUsed < 1 {
		free := spec.Concurrent - held - s.concHeld
		want := min(s.waiting, max(1, spec.Concurrent/live)) - (s.concHeld - s.concUsed)
		if d.conc = min(free, max(want, 1)); d.conc <= 0 {
			return delta{}
		}
	}
	return d
}

// sliceParts is how many slices a limit's window is cut into per waiting
// worker: more means fairer spreading near the window's end, fewer means
// fewer compare-and-sets.
const sliceParts = 4

// share returns the slice to take: a part of the limit for each waiting
// worker, at least need, at most what the others' claims leave (allowed).
// When the claims leave less than need, a worker still under its own
// claim (claimant), or any worker at the window's tail, may take just need
// if that much remains; otherwise 0.
func share(limit, allowed, remaining, need, live int64, claimant bool) int64 {
	switch {
	case remaining < need:
		return 0
	case allowed >= need:
		return min(max(need, limit/(sliceParts*live)), allowed)
	case claimant || remaining < 2*need:
		// The window's tail: what is left serves one more reservation at
		// most, whoever asks first. Each worker computes its own part
		// from its queue as it is now and the others' from their reports,
		// so two workers can each take the other for the claimant.
		return need
	}
	return 0
}

// roll starts window w in p: the last window's use is kept in Last, the
// leases of the window reset. It reports whether p changed.
func (p *Pool) roll(w int64, spec Spec) bool {
	if p.Window == w {
		return false
	}
	last := Totals{Window: p.Window}
	for id, h := range p.Holders {
		last.add(h.Used)
		h.Requests, h.Tokens, h.Used = 0, 0, Totals{Window: w}
		p.Holders[id] = h
	}
	if p.Window == w-1 {
		p.Last = &last
	} else {
		p.Last = nil
	}
	p.Window, p.Requests, p.Tokens = w, 0, 0
	return true
}

// expire drops the holders whose lease lapsed (never self): their slots
// return; what they took of the window stays counted.
func (p *Pool) expire(now time.Time, self string) bool {
	changed := false
	for id, h := range p.Holders {
		if id != self && h.UntilMs < now.UnixMilli() {
			delete(p.Holders, id)
			changed = true
		}
	}
	return changed
}

// leave returns everything this worker holds of limit name and removes
// it from the pool.
func (l *Limiter) leave(ctx context.Context, name string) error {
	for range maxCAS {
		p, rev, err := l.cfg.Store.pool(ctx, name)
		if err != nil || rev == 0 {
			return err
		}
		me, ok := p.Holders[l.cfg.Worker]
		if !ok {
			return nil
		}
		l.mu.Lock()
		loc := l.limits[name]
		var reqLeft, tokLeft int64
		if loc != nil && loc.window == p.Window {
			reqLeft, tokLeft = max(loc.reqLeft, 0), max(loc.tokLeft, 0)
		}
		l.mu.Unlock()
		p.Requests -= min(reqLeft, me.Requests)
		p.Tokens -= min(tokLeft, me.Tokens)
		delete(p.Holders, l.cfg.Worker)
		err = l.cfg.Store.writePool(ctx, name, p, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		return err
	}
	return errors.New("limits: too many compare-and-set conflicts on the pool")
}
