// Package limits shares model-provider limits (requests and tokens per
// window, concurrent calls) across every worker of a fleet.
//
// A limit's Spec, its Pool (what the fleet took this window, worker by
// worker) and its Pause live in one KV bucket (wire.Namespace.LimitsBucket),
// keys spec.<name>, pool.<name> and pause.<name>. A process holds one
// Limiter; a reservation is served from slices of the window the Limiter
// leased from the pool by compare-and-set, so a hot limit costs one
// compare-and-set per slice, not per call. A Limiter's holding in the pool
// carries a lease it renews: a killed worker's concurrent slots return to
// the limit when its lease lapses (the next compare-and-set by any worker
// drops it); what it took of the current window stays counted until the
// window rolls, since its calls may have reached the provider.
//
// Waiting reservations are served fairly over the tenant key of the run's
// dispatch across the fleet (fair.go): each holder reports its waiting
// and open reservations per tenant in the pool; a worker is entitled to
// the sum over its tenants of the tenant's weighted share among the
// tenants waiting fleet-wide × its part of the tenant's reservations, takes
// what the other waiting holders' unleased entitlements leave (until the
// window's last quarter or its last reservation's worth), and its
// weighted fair queue serves its tenants in those proportions. A grant
// still open at a roll and made in the window's last tenth is counted in
// the next window too (the provider counts its call there), unless its
// settle says the call was answered before the roll; a blocked
// worker gives back its remnant and what settles return to it. A pause (a
// provider's 429 with its delay) is written to pause.<name>, which every
// Limiter watches, and holds every reservation of the limit until it ends.
// A reservation is released (its unused request and tokens go back to its
// Limiter's slice, its slot to the pool) when it is settled with the real
// usage or released unused; nothing here is at-least-once: a slice lost
// with its worker is at most one window of one worker's share.
package limits
