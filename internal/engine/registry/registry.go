// Package registry holds the agent registry: which agent types the live
// workers serve, with a description and the JSON Schemas of their input and
// output, and the LLM tool definitions derived from them.
//
// Every worker announces each agent type it serves with one key,
// <agentType>.<workerId>, in the bucket jetrun_agents, written with a
// per-key TTL (DefaultTTL) and rewritten every third of it, and purged on a
// graceful shutdown: the keys of a worker that died expire. The live agent
// types are the keys that exist; how many workers serve a type is how many
// keys it has. Announcements are idempotent (a rewrite replaces the key)
// and nothing else writes the bucket.
//
// Schemas are JSON Schema documents (draft 2020-12 by default), compiled
// with github.com/santhosh-tekuri/jsonschema/v6 without file or network
// access. Inputs are checked where runs enter (the parent API and the
// worker's dispatch) and outputs where they leave (the worker); see
// docs/protocol.md.
package registry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetrun/jetrun/internal/engine/bucket"
	"github.com/jetrun/jetrun/internal/engine/wire"
	"github.com/jetrun/jetrun/pkg/events"
)

// DefaultTTL is how long an announcement lives unless rewritten.
const DefaultTTL = 30 * time.Second

// markerTTL is how long the marker of a withdrawn announcement lives.
const markerTTL = time.Minute

// Info describes an agent type. Zero fields are left out: a type without
// an input schema accepts any input (any JSON value but null).
type Info struct {
	// Description says what the agent does, for people and for models
	// choosing a tool.
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema of a dispatch's input.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// OutputSchema is the JSON Schema of a completed run's output.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// Validate compiles both schemas and reports every problem at once.
func (i Info) Validate() error {
	var errs []error
	if _, err := Compile(i.InputSchema); err != nil {
		errs = append(errs, fmt.Errorf("input schema: %w", err))
	}
	if _, err := Compile(i.OutputSchema); err != nil {
		errs = append(errs, fmt.Errorf("output schema: %w", err))
	}
	return errors.Join(errs...)
}

// Announcement is one worker's announcement of one agent type, the value of
// key <agentType>.<worker>.
type Announcement struct {
	AgentType string    `json:"agentType"`
	Worker    string    `json:"worker"`
	At        time.Time `json:"at"`
	// LeaseMs and FleetConcurrency are the worker's lease and fleet
	// concurrency: the ack wait and max ack pending the parent-worker
	// gives the agent type's dispatch consumer when it creates it (zero:
	// not said).
	LeaseMs          int64 `json:"leaseMs,omitempty"`
	FleetConcurrency int   `json:"fleetConcurrency,omitempty"`
	Info
}

// Agent is a live agent type as the registry lists it.
type Agent struct {
	AgentType    string          `json:"agentType"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// Workers is how many live workers announce the type; WorkerIDs names
	// them.
	Workers   int      `json:"workers"`
	WorkerIDs []string `json:"workerIds"`
	// SchemasDiffer says the workers do not all announce the same
	// description and schemas (a rolling upgrade): the newest announcement
	// is listed.
	SchemasDiffer bool `json:"schemasDiffer,omitempty"`
}

// Registry reads and writes the agents bucket.
type Registry struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
}

// Open binds the agents bucket, creating it when it does not exist.
func Open(ctx context.Context, js jetstream.JetStream, ns wire.Namespace, replicas int) (*Registry, error) {
	name := ns.AgentsBucket()
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "jetrun agent registry: <agentType>.<worker> = the worker's announcement, with a TTL",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    cmp.Or(replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
		if err == nil { // it refuses roll-ups: see bucket.Harden
			_, err = bucket.Harden(ctx, js, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("registry: open bucket %s: %w", name, err)
	}
	return &Registry{kv: kv, js: js}, nil
}

// Bind binds the agents bucket if it exists; ok is false when no worker
// ever announced anything.
func Bind(ctx context.Context, js jetstream.JetStream, ns wire.Namespace) (r *Registry, ok bool, err error) {
	kv, err := js.KeyValue(ctx, ns.AgentsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("registry: bind bucket %s: %w", ns.AgentsBucket(), err)
	}
	return &Registry{kv: kv, js: js}, true, nil
}

func key(agentType, worker string) string { return agentType + "." + worker }

// Announce writes a's key with a TTL of ttl (at least a second).
func (r *Registry) Announce(ctx context.Context, a Announcement, ttl time.Duration) error {
	if a.At.IsZero() {
		a.At = time.Now()
	}
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("registry: encode announcement of %s: %w", a.AgentType, err)
	}
	subject := wire.BucketSubject(r.kv.Bucket(), key(a.AgentType, a.Worker))
	if _, err := r.js.Publish(ctx, subject, data, jetstream.WithMsgTTL(max(ttl, time.Second))); err != nil {
		return fmt.Errorf("registry: announce agent type %s of worker %s: %w", a.AgentType, a.Worker, err)
	}
	return nil
}

// Withdraw removes worker's announcement of agentType.
func (r *Registry) Withdraw(ctx context.Context, agentType, worker string) error {
	if err := bucket.DeleteKey(ctx, r.js, r.kv.Bucket(), key(agentType, worker), markerTTL); err != nil {
		return fmt.Errorf("registry: withdraw agent type %s of worker %s: %w", agentType, worker, err)
	}
	return nil
}

// Announcements returns the live announcements, of agentType only when it
// is not empty.
func (r *Registry) Announcements(ctx context.Context, agentType string) ([]Announcement, error) {
	filter := ">"
	if agentType != "" {
		filter = agentType + ".*"
	}
	w, err := r.kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("registry: list: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Announcement
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("registry: list: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("registry: list: watch ended")
			}
			if e == nil { // the initial values are in
				return out, nil
			}
			var a Announcement
			if json.Unmarshal(e.Value(), &a) == nil && a.AgentType != "" {
				out = append(out, a)
			}
		}
	}
}

// Agents returns the live agent types, sorted by name.
func (r *Registry) Agents(ctx context.Context) ([]Agent, error) {
	as, err := r.Announcements(ctx, "")
	if err != nil {
		return nil, err
	}
	return Group(as), nil
}

// Agent returns the live agent type t; ok is false when no worker announces
// it.
func (r *Registry) Agent(ctx context.Context, t string) (Agent, bool, error) {
	as, err := r.Announcements(ctx, t)
	if err != nil || len(as) == 0 {
		return Agent{}, false, err
	}
	return Group(as)[0], true, nil
}

// Watch follows the announcements: those live now first, then each one
// as it is written again or anew (a worker rewrites its own every third
// of their TTL). The agent type is the key's (<agentType>.<worker>): a key
// whose agent type is not a valid token is skipped, and a value that does
// not decode comes with the agent type alone. The channel is closed when
// ctx ends or the watch breaks.
func (r *Registry) Watch(ctx context.Context) (<-chan Announcement, error) {
	w, err := r.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("registry: watch: %w", err)
	}
	out := make(chan Announcement, 64)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // the live keys are in
				}
				t, _, _ := strings.Cut(e.Key(), ".")
				if events.ValidateToken("agent type", t) != nil {
					continue
				}
				var a Announcement
				if json.Unmarshal(e.Value(), &a) != nil {
					a = Announcement{}
				}
				a.AgentType = t
				select {
				case out <- a:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// Group folds announcements into agent types, sorted by name; each lists
// its newest announcement's description and schemas.
func Group(as []Announcement) []Agent {
	by := map[string][]Announcement{}
	for _, a := range as {
		by[a.AgentType] = append(by[a.AgentType], a)
	}
	out := make([]Agent, 0, len(by))
	for t, list := range by {
		slices.SortFunc(list, func(a, b Announcement) int { return b.At.Compare(a.At) })
		newest := list[0]
		ag := Agent{AgentType: t, Description: newest.Description, InputSchema: newest.InputSchema,
			OutputSchema: newest.OutputSchema, Workers: len(list)}
		for _, a := range list {
			ag.WorkerIDs = append(ag.WorkerIDs, a.Worker)
			if a.Description != newest.Description || !jsonEqual(a.InputSchema, newest.InputSchema) ||
				!jsonEqual(a.OutputSchema, newest.OutputSchema) {
				ag.SchemasDiffer = true
			}
		}
		slices.Sort(ag.WorkerIDs)
		out = append(out, ag)
	}
	slices.SortFunc(out, func(a, b Agent) int { return strings.Compare(a.AgentType, b.AgentType) })
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	_ = json.Unmarshal(a, &x)
	_ = json.Unmarshal(b, &y)
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// Cache answers "what is the input schema of agent type t" from the
// registry, remembering each answer for CacheTTL so a dispatch costs no
// round trip most of the time. A schema changed by a new worker version is
// seen within CacheTTL.
type Cache struct {
	js jetstream.JetStream
	ns wire.Namespace

	mu  sync.Mutex
	reg *Registry
	by  map[string]cached
}

type cached struct {
	in, out    *Schema
	until      time.Time
	refreshing bool // a refresh ahead of until is under way
}

// refreshAhead is how long before an answer expires a Cache looks it up
// again in the background, so a steady stream of dispatches never waits for
// the registry (an answer is still never used past CacheTTL).
const refreshAhead = CacheTTL / 5

// CacheTTL is how long a Cache keeps an answer.
const CacheTTL = 5 * time.Second

// NewCache returns a cache over the registry of ns.
func NewCache(js jetstream.JetStream, ns wire.Namespace) *Cache {
	return &Cache{js: js, ns: ns, by: map[string]cached{}}
}

// Schemas returns the compiled input and output schemas of agent type t (nil
// when it announces none, or no worker announces it).
func (c *Cache) Schemas(ctx context.Context, t string) (in, out *Schema, err error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.by[t]
	fresh := ok && now.Before(e.until)
	ahead := fresh && !e.refreshing && now.After(e.until.Add(-refreshAhead))
	if ahead {
		e.refreshing = true
		c.by[t] = e
	}
	c.mu.Unlock()
	if ahead {
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshAhead)
			defer cancel()
			if _, _, err := c.lookup(ctx, t, e); err != nil {
				c.mu.Lock()
				if cur, ok := c.by[t]; ok {
					cur.refreshing = false
					c.by[t] = cur
				}
				c.mu.Unlock()
			}
		}()
	}
	if fresh {
		return e.in, e.out, nil
	}
	return c.lookup(ctx, t, e)
}

// lookup reads agent type t's schemas from the registry and remembers
// them; prev is the answer it replaces (its compiled schemas are kept when
// the documents did not change).
func (c *Cache) lookup(ctx context.Context, t string, prev cached) (in, out *Schema, err error) {
	c.mu.Lock()
	reg := c.reg
	c.mu.Unlock()
	var e cached
	if reg == nil {
		r, found, err := Bind(ctx, c.js, c.ns)
		if err != nil {
			return nil, nil, err
		}
		if !found { // no worker announced anything yet: no schemas
			c.remember(t, cached{})
			return nil, nil, nil
		}
		reg = r
		c.mu.Lock()
		c.reg = r
		c.mu.Unlock()
	}
	ag, found, err := reg.Agent(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	if found {
		// A schema that does not compile was refused by its worker; one
		// that slips through is ignored rather than blocking every run.
		e.in = recompile(prev.in, ag.InputSchema)
		e.out = recompile(prev.out, ag.OutputSchema)
	}
	c.remember(t, e)
	return e.in, e.out, nil
}

// recompile compiles raw, reusing prev when it was compiled from the same
// document.
func recompile(prev *Schema, raw json.RawMessage) *Schema {
	if prev != nil && bytes.Equal(prev.raw, bytes.TrimSpace(raw)) {
		return prev
	}
	s, _ := Compile(raw)
	return s
}

func (c *Cache) remember(t string, e cached) {
	e.refreshing = false
	e.until = time.Now().Add(CacheTTL)
	c.mu.Lock()
	c.by[t] = e
	c.mu.Unlock()
}
