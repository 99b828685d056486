package limits

// waiter is one reservation waiting for room.
type waiter struct {
	tenant string
	tokens int64
	seq    uint64
	ch     chan result // buffered 1: the loop never blocks on it
}

type result struct {
	g   *Grant
	err error
}

// fairQueue serves waiting reservations by weighted fair queueing over
// tenants: each tenant has a virtual time that grows by cost/weight per
// reservation served (corrected by what the call really used when it is
// settled); the waiting tenant with the smallest goes first. A tenant that
// starts waiting again starts at the queue's current virtual time, so an
// idle tenant gets no credit for its idleness.
type fairQueue struct {
	tenants map[string]*tenantQueue
	vtime   float64
	seq     uint64
	n       int
}

type tenantQueue struct {
	waiters []*waiter
	vt      float64
}

func (q *fairQueue) len() int { return q.n }

func (q *fairQueue) push(w *waiter) {
	if q.tenants == nil {
		q.tenants = map[string]*tenantQueue{}
	}
	t := q.tenants[w.tenant]
	if t == nil {
		t = &tenantQueue{}
		q.tenants[w.tenant] = t
	}
	if len(t.waiters) == 0 {
		t.vt = max(t.vt, q.vtime)
	}
	q.seq++
	w.seq = q.seq
	t.waiters = append(t.waiters, w)
	q.n++
}

// head returns the waiter served next, or nil.
func (q *fairQueue) head() *waiter {
	var best *tenantQueue
	for _, t := range q.tenants {
		if len(t.waiters) == 0 {
			continue
		}
		if best == nil || t.vt < best.vt || t.vt == best.vt && t.waiters[0].seq < best.waiters[0].seq {
			best = t
		}
	}
	if best == nil {
		return nil
	}
	return best.waiters[0]
}

// count returns how many of tenant's reservations wait.
func (q *fairQueue) count(tenant string) int64 {
	if t := q.tenants[tenant]; t != nil {
		return int64(len(t.waiters))
	}
	return 0
}

// demand returns the waiting reservations per tenant and the tokens they
// ask for.
func (q *fairQueue) demand() (map[string]int64, int64) {
	if q.n == 0 {
		return nil, 0
	}
	per := make(map[string]int64, len(q.tenants))
	var tokens int64
	for name, t := range q.tenants {
		if len(t.waiters) > 0 {
			per[name] = int64(len(t.waiters))
		}
		for _, w := range t.waiters {
			tokens += w.tokens
		}
	}
	return per, tokens
}

// pop removes w, the head, charging its tenant cost/weight.
func (q *fairQueue) pop(w *waiter, cost, weight float64) {
	t := q.tenants[w.tenant]
	t.waiters[0] = nil
	t.waiters = t.waiters[1:]
	q.n--
	q.vtime = t.vt
	t.vt += cost / weight
	if len(t.waiters) == 0 && t.vt <= q.vtime {
		delete(q.tenants, w.tenant)
	}
}

// charge corrects tenant's virtual time by cost/weight (negative: a
// refund), once a grant's real cost is known.
func (q *fairQueue) charge(tenant string, cost, weight float64) {
	if t := q.tenants[tenant]; t != nil {
		t.vt += cost / weight
	}
}

// remove takes w out of the queue; false if it is not there (served).
func (q *fairQueue) remove(w *waiter) bool {
	t := q.tenants[w.tenant]
	if t == nil {
		return false
	}
	for i, o := range t.waiters {
		if o == w {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			q.n--
			return true
		}
	}
	return false
}

// drain removes every waiter and returns them.
func (q *fairQueue) drain() []*waiter {
	var all []*waiter
	for _, t := range q.tenants {
		all = append(all, t.waiters...)
	}
	q.tenants, q.n = nil, 0
	return all
}
