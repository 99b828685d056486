package limits

// Fleet-wide fairness. Each holder reports, at each of its compare-and-sets
// on the pool, its waiting reservations per tenant and the tokens they ask
// for. From these every worker computes the same split of the window:
//
//   - a tenant waiting anywhere in the fleet is entitled to its weight's
//     share among the tenants waiting fleet-wide;
//   - a holder is entitled to the sum, over the tenants it has waiting, of
//     the tenant's share × the holder's part of that tenant's waiters.
//
// A holder's claim is what it is entitled to and has not leased yet, while
// it has reservations waiting: a worker may take from the pool what the
// other holders' claims leave, so capacity no one waits for is not held
// back (work-conserving: a worker whose queue empties reports it at once
// when others wait, dropping its claim), and a tenant whose runs all sit on one
// worker still gets its share of the fleet's window. Inside a worker the
// fair queue serves its tenants in the same proportions (localWeight).
// Claims are only honoured for holders that reported in this window or the
// last: a killed worker's claim stops counting at the next roll.

// fleetShares returns each fresh waiting holder's part of the window (they
// sum to 1) and, per tenant, the reservations the other holders have
// waiting. mine is self's waiting per tenant (its holding in p may be
// stale).
func fleetShares(p *Pool, spec Spec, self string, mine map[string]int64) (parts map[string]float64, others map[string]int64) {
	waiting := map[string]map[string]int64{}
	totals := map[string]int64{}
	others = map[string]int64{}
	for id, h := range p.Holders {
		if id == self || !h.fresh(p.Window) {
			continue
		}
		for t, n := range h.Tenants {
			if n > 0 {
				totals[t] += n
				others[t] += n
			}
		}
		if len(h.Tenants) > 0 {
			waiting[id] = h.Tenants
		}
	}
	for t, n := range mine {
		if n > 0 {
			totals[t] += n
		}
	}
	if len(mine) > 0 {
		waiting[self] = mine
	}
	var weights float64
	for t := range totals {
		weights += float64(spec.Weight(t))
	}
	parts = make(map[string]float64, len(waiting))
	for id, ts := range waiting {
		var f float64
		for t, n := range ts {
			if n > 0 {
				f += float64(spec.Weight(t)) / weights * float64(n) / float64(totals[t])
			}
		}
		parts[id] = f
	}
	return parts, others
}

// fresh reports whether h reported in window w or the one before: only
// then does its claim count.
func (h Holder) fresh(w int64) bool { return h.Seen >= w-1 && h.Waiting > 0 }

// claims returns, for the requests and the tokens of the window, what the
// fresh waiting holders other than self are entitled to and have not
// leased yet, and the same for self.
func (p *Pool) claims(spec Spec, self string, parts map[string]float64, me Holder) (others, mine [2]float64) {
	claim := func(part float64, reqLeased, tokLeased int64) (c [2]float64) {
		if spec.Requests > 0 {
			c[0] = max(part*float64(spec.Requests)-float64(reqLeased), 0)
		}
		if spec.Tokens > 0 {
			c[1] = max(part*float64(spec.Tokens)-float64(tokLeased), 0)
		}
		return c
	}
	for id, h := range p.Holders {
		if id == self || !h.fresh(p.Window) {
			continue
		}
		c := claim(parts[id], h.Requests, h.Tokens)
		others[0] += c[0]
		others[1] += c[1]
	}
	mine = claim(parts[self], me.Requests, me.Tokens)
	return others, mine
}

// allowed returns how much of one dimension's remaining a worker may take:
// what the others' claims leave, or, when the claims exceed what remains,
// its claim's proportion of it.
func allowed(remaining int64, others, mine float64) int64 {
	if remaining <= 0 {
		return 0
	}
	r := float64(remaining)
	if others+mine <= r {
		return int64(r - others)
	}
	return int64(r * mine / (others + mine))
}

// localWeight is the weight of tenant, with n reservations waiting here,
// in this worker's fair queue: its weight × this worker's part of the
// tenant's waiters in the fleet, so that the worker serves each tenant in
// the proportion its entitlement was computed with.
func localWeight(spec Spec, tenant string, n, others int64) float64 {
	if n <= 0 {
		return float64(spec.Weight(tenant))
	}
	return float64(spec.Weight(tenant)) * float64(n) / float64(n+max(others, 0))
}

// A grant's cost in its tenant's fair queue: its tokens when the limit
// counts them (at least 1), else one request.
func grantCost(spec Spec, tokens int64) float64 {
	if spec.Tokens > 0 {
		return float64(max(tokens, 1))
	}
	return 1
}
