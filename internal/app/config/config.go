// Package config holds the binaries' settings, loaded from JETRUN_*
// environment variables with envconfig. Only the binaries' main functions
// load it; packages under pkg/ take plain Config structs.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/jetrun/jetrun/internal/app/agents"
	"github.com/jetrun/jetrun/internal/app/agents/demo"
	"github.com/jetrun/jetrun/internal/app/agents/execagent"
	"github.com/jetrun/jetrun/internal/app/agents/httpagent"
	"github.com/jetrun/jetrun/internal/app/httpapi"
	"github.com/jetrun/jetrun/internal/app/localurl"
	"github.com/jetrun/jetrun/internal/engine/limits"

	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/jetrun"
	"github.com/jetrun/jetrun/pkg/parent"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Prefix begins every environment variable. Each field names its variable in
// full (envconfig:"JETRUN_..."), and Load hands envconfig no prefix: given
// one, envconfig falls back to the tag without it, so NATS_URL (the nats
// CLI's own variable) or LEASE would configure jetrun.
const Prefix = "JETRUN"

// DefaultChildNATSURL is where a child-worker connects when JETRUN_NATS_URL is
// empty and the data directory names no local server (see Local): the
// parent-worker's embedded server on this host, on its default port.
const DefaultChildNATSURL = "nats://127.0.0.1:4222"

// NATS holds the connection settings shared by every binary.
type NATS struct {
	URL      string `envconfig:"JETRUN_NATS_URL" desc:"NATS server URL(s), comma-separated; child-worker and jetrun CLI: default the URL in JETRUN_DATA_DIR/nats-url, else nats://127.0.0.1:4222; parent-worker: empty starts an embedded server"`
	Creds    string `envconfig:"JETRUN_NATS_CREDS" desc:"path to a NATS .creds file (JWT auth)"`
	NKey     string `envconfig:"JETRUN_NATS_NKEY" desc:"path to an nkey seed file"`
	User     string `envconfig:"JETRUN_NATS_USER" desc:"NATS user name"`
	Password string `envconfig:"JETRUN_NATS_PASSWORD" desc:"NATS password (never logged)"`
	Token    string `envconfig:"JETRUN_NATS_TOKEN" desc:"NATS auth token (never logged)"`
	TLSCA    string `envconfig:"JETRUN_NATS_TLS_CA" desc:"path to a PEM CA bundle that signs the server's certificate (turns TLS on)"`
	TLSCert  string `envconfig:"JETRUN_NATS_TLS_CERT" desc:"path to a PEM client certificate, for servers that verify clients (needs JETRUN_NATS_TLS_KEY)"`
	TLSKey   string `envconfig:"JETRUN_NATS_TLS_KEY" desc:"path to the PEM private key of JETRUN_NATS_TLS_CERT"`

	urlFile string // the file URL was read from (see Local), if any
}

// URLFile returns the file the URL was read from when JETRUN_NATS_URL was
// empty (a local parent-worker's data directory), or "".
func (n NATS) URLFile() string { return n.urlFile }

func (n NATS) validate() error {
	if (n.TLSCert == "") != (n.TLSKey == "") {
		return errors.New("JETRUN_NATS_TLS_CERT and JETRUN_NATS_TLS_KEY go together: set both or neither")
	}
	return nil
}

// Local is the local parent-worker's data directory.
type Local struct {
	DataDir string `envconfig:"JETRUN_DATA_DIR" default:"./data" desc:"data directory of the local parent-worker: its embedded server's JetStream store, and the file nats-url with that server's URL, which child-worker and jetrun read when JETRUN_NATS_URL is empty"`
}

// localNATS sets n's URL to the local parent-worker's embedded server: the
// URL recorded in the data directory, or DefaultChildNATSURL when none is
// (or the file cannot be read).
func (l Local) localNATS(n *NATS) {
	if url, err := localurl.Read(l.DataDir); err == nil && url != "" {
		n.URL, n.urlFile = url, localurl.Path(l.DataDir)
		return
	}
	n.URL = DefaultChildNATSURL
}

// Streams holds the stream settings shared by every binary.
type Streams struct {
	Prefix            string        `envconfig:"JETRUN_PREFIX" default:"jetrun" desc:"subject prefix; streams are <PREFIX>_DISPATCH etc., the bucket <prefix>_runs"`
	Replicas          int           `envconfig:"JETRUN_REPLICAS" default:"1" desc:"replicas of streams and bucket when created (3 on a cluster)"`
	DedupWindow       time.Duration `envconfig:"JETRUN_DEDUP_WINDOW" default:"2m" desc:"dedup window of the dispatch stream when created"`
	EventsDedupWindow time.Duration `envconfig:"JETRUN_EVENTS_DEDUP_WINDOW" default:"30s" desc:"dedup window of the events streams when created: an event re-sent within it is stored once; keep it above JETRUN_LEASE (the server holds each id that long)"`
	EventsMaxAge      time.Duration `envconfig:"JETRUN_EVENTS_MAX_AGE" default:"168h" desc:"how long run events are kept for replay, when created"`
	EventsStreams     int           `envconfig:"JETRUN_EVENTS_STREAMS" default:"0" desc:"how many streams hold run events, when created: JETRUN_EVENTS and JETRUN_EVENTS_<i>, each run in one (3 on a three-node cluster spreads their leaders; outside writers need the server mapping in docs/operations.md); 0 takes the existing count, or 1"`
	DLQMaxAge         time.Duration `envconfig:"JETRUN_DLQ_MAX_AGE" default:"720h" desc:"how long dead letters are kept, when created"`
	FinishMaxAge      time.Duration `envconfig:"JETRUN_FINISH_MAX_AGE" default:"168h" desc:"how long a finish waits in the finish stream for a deliverer, when created (an owed one is published again)"`
}

// Reattach holds how long a caller awaiting a run (parent.Client.Await
// and Run; the HTTP API and the CLI wait through them) waits.
type Reattach struct {
	ReattachNoProgress time.Duration `envconfig:"JETRUN_REATTACH_NO_PROGRESS" default:"2m" desc:"an awaiting caller gives up after this long without a sign of progress (interrupted/no-progress; the run goes on and its id re-attaches); negative: never"`
	ReattachMaxWindow  time.Duration `envconfig:"JETRUN_REATTACH_MAX_WINDOW" default:"0s" desc:"when positive, the most an awaiting caller waits in all; then the run is given up (interrupted/window-exceeded) and stopped"`
}

// ParentConfig is the parent client configuration of these settings.
func (r Reattach) ParentConfig(logger *slog.Logger) parent.Config {
	return parent.Config{
		Logger:             logger,
		ReattachNoProgress: r.ReattachNoProgress, ReattachMaxWindow: r.ReattachMaxWindow,
	}
}

// Log holds the logging settings.
type Log struct {
	Format string `envconfig:"JETRUN_LOG_FORMAT" default:"text" desc:"log format: text or json"`
	Level  string `envconfig:"JETRUN_LOG_LEVEL" default:"info" desc:"log level: debug, info, warn or error"`
}

// Pool holds the settings of a pool of child workers.
type Pool struct {
	WorkerID         string        `envconfig:"JETRUN_WORKER_ID" desc:"worker id written on the rows it holds (default host-pid-random)"`
	Concurrency      int           `envconfig:"JETRUN_CONCURRENCY" default:"16" desc:"runs of each agent type whose handlers this process runs at once (a run stores its end outside its slot)"`
	FleetConcurrency int           `envconfig:"JETRUN_FLEET_CONCURRENCY" default:"100000" desc:"runs of one agent type in flight across all workers (consumer MaxAckPending)"`
	Lease            time.Duration `envconfig:"JETRUN_LEASE" default:"15s" desc:"worker liveness TTL (renewed every third of it, one write per worker); a dead worker's runs are taken over within about one lease"`
	MaxAttempts      int           `envconfig:"JETRUN_MAX_ATTEMPTS" default:"5" desc:"takeovers after lost workers before a run ends error (max-attempts)"`
	ShutdownTimeout  time.Duration `envconfig:"JETRUN_SHUTDOWN_TIMEOUT" default:"30s" desc:"on SIGTERM, how long runs in flight may finish before they are handed back"`
	MaxDepth         int           `envconfig:"JETRUN_MAX_DEPTH" default:"8" desc:"deepest nesting of runs accepted (dispatch depth); also bounds cancel cascades"`
	ChunkWindow      time.Duration `envconfig:"JETRUN_CHUNK_WINDOW" default:"50ms" desc:"a run's chunk leaves at once when the run is quiet (no chunk within the window before it, its events acknowledged); otherwise it waits at most this window, and the chunks emitted meanwhile leave with it as one stored event (readers still see them one by one); 0 turns coalescing off"`
	ClaimWindow      time.Duration `envconfig:"JETRUN_CLAIM_WINDOW" default:"50ms" desc:"a short run whose handler ends within this window having emitted nothing stores its ending only (final row and one status event); one that emits or runs longer claims its run then; at most a sixth of JETRUN_LEASE; 0 claims every run at its start"`
}

// Reconcile holds the reconciler's and finish deliverer's settings.
type Reconcile struct {
	ReconcileInterval    time.Duration `envconfig:"JETRUN_RECONCILE_INTERVAL" default:"5s" desc:"time between reconciler sweeps; also its leader lease"`
	Retention            time.Duration `envconfig:"JETRUN_RETENTION" default:"168h" desc:"final runs older than this are cleared automatically (0 keeps them)"`
	DetachedMaxBudget    time.Duration `envconfig:"JETRUN_DETACHED_MAX_BUDGET" default:"24h" desc:"absolute budget of a detached run whose dispatch sets none"`
	DetachedNoProgress   time.Duration `envconfig:"JETRUN_DETACHED_NO_PROGRESS_BUDGET" default:"1h" desc:"no-progress budget of a detached run whose dispatch sets none (armed by its first signal)"`
	MaxRedispatches      int           `envconfig:"JETRUN_MAX_REDISPATCHES" default:"3" desc:"re-dispatches of a run whose dispatch was lost before it ends error (dispatch-lost)"`
	FinishWebhooks       []string      `envconfig:"JETRUN_FINISH_WEBHOOKS" desc:"finish handlers that POST the finish as JSON: name=url[,name=url]; 2xx means delivered"`
	AskWebhook           string        `envconfig:"JETRUN_ASK_WEBHOOK" desc:"POST each new ask (a run waiting for a person) as JSON to this URL, e.g. to post it to a chat; 2xx means delivered; at least once, Idempotency-Key ask.<id>"`
	FinishMaxAttempts    int           `envconfig:"JETRUN_FINISH_MAX_ATTEMPTS" default:"5" desc:"finish handler attempts before the finish is dead-lettered"`
	FinishTimeout        time.Duration `envconfig:"JETRUN_FINISH_TIMEOUT" default:"30s" desc:"bound on one finish handler call; a crashed delivery is retried after it"`
	FinishRetryDelay     time.Duration `envconfig:"JETRUN_FINISH_RETRY_DELAY" default:"1s" desc:"wait before a failed finish is retried; doubles per attempt, up to 5m"`
	DispatchUnservedWait time.Duration `envconfig:"JETRUN_DISPATCH_UNSERVED_WAIT" default:"0" desc:"a dispatch for an agent type no worker takes (none serves it, or none is running) is dead-lettered to jetrun.dlq.<agentType> after this long and its run ends error (reason no-worker); 0 keeps it waiting for a worker"`
	FinishUnservedWait   time.Duration `envconfig:"JETRUN_FINISH_UNSERVED_WAIT" default:"24h" desc:"a finish no deliverer takes (nothing serves its handler) is dead-lettered after this long; after a minute the row and jetrun.obs.finish.unserved say so"`
	Meter                bool          `envconfig:"JETRUN_METER" default:"true" desc:"meter every run: publish jetrun.obs.run.started and run.finished (agent type, parent, status, attempt, duration)"`
}

// Agents holds the agent types defined by configuration: http agents hand
// runs to HTTP services, exec agents run commands from an allowlist (see
// docs/protocol.md, "Write a child in another language"). Every one is
// served by child-worker, and by parent-worker's in-process pool.
type Agents struct {
	HTTPAgents      []string      `envconfig:"JETRUN_HTTP_AGENTS" desc:"http agent types: name=url[,name=url]; each run is POSTed to its url, which answers with NDJSON events"`
	HTTPAgentTokens []string      `envconfig:"JETRUN_HTTP_AGENT_TOKENS" desc:"bearer tokens of http agent types: name=token[,name=token] (never logged)"`
	HTTPTimeout     time.Duration `envconfig:"JETRUN_HTTP_TIMEOUT" default:"30s" desc:"http agents: bound on connecting and on the silence between two response lines"`
	HTTPMaxLine     int           `envconfig:"JETRUN_HTTP_MAX_LINE" default:"1048576" desc:"http agents: longest response line, bytes"`
	ExecAgents      []string      `envconfig:"JETRUN_EXEC_AGENTS" desc:"exec agent types: name=command arg...[,name=command arg...]; arguments split on spaces"`
	ExecGrace       time.Duration `envconfig:"JETRUN_EXEC_GRACE" default:"5s" desc:"exec agents: time between SIGTERM and SIGKILL to a stopped command's process group"`
	ExecMaxLine     int           `envconfig:"JETRUN_EXEC_MAX_LINE" default:"1048576" desc:"exec agents: longest stdout line, bytes"`
	AgentSchemasDir string        `envconfig:"JETRUN_AGENT_SCHEMAS_DIR" desc:"directory of <agentType>.json files ({description, inputSchema, outputSchema}) describing http and exec agent types in the agent registry"`
}

// Configured returns the http and exec agent types, checked.
func (a Agents) Configured() (agents.Configured, error) {
	var errs []error
	out := agents.Configured{HTTP: map[string]httpagent.Config{}, Exec: map[string]execagent.Config{}}
	tokens := map[string]string{}
	for _, pair := range a.HTTPAgentTokens {
		name, token, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || token == "" {
			errs = append(errs, fmt.Errorf("JETRUN_HTTP_AGENT_TOKENS: an entry for %q is not name=token", name))
			continue
		}
		tokens[name] = token
	}
	for _, pair := range a.HTTPAgents {
		name, url, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			errs = append(errs, fmt.Errorf("JETRUN_HTTP_AGENTS: %q is not name=url", pair))
			continue
		}
		c := httpagent.Config{URL: url, Token: tokens[name], Timeout: a.HTTPTimeout, MaxLine: a.HTTPMaxLine}
		errs = append(errs, checkAgent("JETRUN_HTTP_AGENTS", name, c.Validate(), out))
		out.HTTP[name] = c
	}
	for name := range tokens {
		if _, ok := out.HTTP[name]; !ok {
			errs = append(errs, fmt.Errorf("JETRUN_HTTP_AGENT_TOKENS: %s is not an http agent type", name))
		}
	}
	for _, pair := range a.ExecAgents {
		name, command, ok := strings.Cut(strings.TrimSpace(pair), "=")
		fields := strings.Fields(command)
		if !ok || len(fields) == 0 {
			errs = append(errs, fmt.Errorf("JETRUN_EXEC_AGENTS: %q is not name=command [arg ...]", pair))
			continue
		}
		c := execagent.Config{Path: fields[0], Args: fields[1:], Grace: a.ExecGrace, MaxLine: a.ExecMaxLine}
		errs = append(errs, checkAgent("JETRUN_EXEC_AGENTS", name, c.Validate(), out))
		out.Exec[name] = c
	}
	if a.HTTPTimeout <= 0 || a.ExecGrace < 0 {
		errs = append(errs, errors.New("JETRUN_HTTP_TIMEOUT must be positive and JETRUN_EXEC_GRACE not negative"))
	}
	if a.HTTPMaxLine < 1024 || a.ExecMaxLine < 1024 {
		errs = append(errs, errors.New("JETRUN_HTTP_MAX_LINE and JETRUN_EXEC_MAX_LINE must be at least 1024"))
	}
	info, err := agentSchemas(a.AgentSchemasDir, out)
	errs = append(errs, err)
	out.Info = info
	return out, errors.Join(errs...)
}

// checkAgent checks a configured agent type's name and settings.
func checkAgent(setting, name string, invalid error, known agents.Configured) error {
	if err := events.ValidateToken("agent type", name); err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	if slices.Contains(known.Names(), name) || slices.Contains(agents.Names(), name) {
		return fmt.Errorf("%s: agent type %s is defined twice or is a built-in", setting, name)
	}
	if invalid != nil {
		return fmt.Errorf("%s: %s: %w", setting, name, invalid)
	}
	return nil
}

// ChildWorker is the child-worker binary's configuration.
type ChildWorker struct {
	NATS
	Local
	Streams
	Pool
	Agents
	Log
	AgentTypes  []string `envconfig:"JETRUN_AGENT_TYPES" desc:"built-in agent types to serve, comma-separated (built-in: demo); default demo when no http or exec agent is configured"`
	MetricsAddr string   `envconfig:"JETRUN_METRICS_ADDR" desc:"listen address of GET /metrics (Prometheus; empty disables it); parent-worker serves /metrics on JETRUN_HTTP_ADDR"`
}

// ParentWorker is the parent-worker binary's configuration.
type ParentWorker struct {
	NATS
	Local
	Streams
	Pool
	Reconcile
	Reattach
	Agents
	Log
	EmbeddedHost   string   `envconfig:"JETRUN_EMBEDDED_HOST" default:"127.0.0.1" desc:"embedded server: listen address (loopback by default)"`
	EmbeddedPort   int      `envconfig:"JETRUN_EMBEDDED_PORT" default:"4222" desc:"embedded server: client port (-1 = random; a busy 4222 falls back to random)"`
	EmbeddedMaxMem int64    `envconfig:"JETRUN_EMBEDDED_MAX_MEMORY" default:"268435456" desc:"embedded server: JetStream memory limit, bytes"`
	EmbeddedMaxFS  int64    `envconfig:"JETRUN_EMBEDDED_MAX_STORE" default:"10737418240" desc:"embedded server: JetStream file store limit, bytes"`
	SyncAlways     bool     `envconfig:"JETRUN_SYNC_ALWAYS" default:"false" desc:"embedded server: fsync every write (no acknowledged write lost to a power loss; make bench prints the cost)"`
	HTTPAddr       string   `envconfig:"JETRUN_HTTP_ADDR" default:"127.0.0.1:8080" desc:"HTTP API listen address (empty disables it); a non-loopback address needs JETRUN_HTTP_TOKENS"`
	HTTPTokens     []string `envconfig:"JETRUN_HTTP_TOKENS" desc:"HTTP API bearer tokens as role=token, comma-separated; role read (lists, runs, events, UI) or write (also dispatch, cancel, signal, clear); never logged"`
	HTTPHosts      []string `envconfig:"JETRUN_HTTP_ALLOWED_HOSTS" desc:"host names (no port) the HTTP API answers to besides localhost, IP addresses and the host of JETRUN_HTTP_ADDR, comma-separated: the names it is served under (other Host headers get 403, against DNS rebinding)"`
	Children       []string `envconfig:"JETRUN_CHILDREN" desc:"built-in agent types to run in an in-process child pool, comma-separated (built-in: demo); http and exec agents join it"`
	DemoRuns       int      `envconfig:"JETRUN_DEMO_RUNS" default:"0" desc:"at start, dispatch this many demo runs as a fan-out, ids demo-1 to demo-N; those already in the store are not dispatched again (make run uses 5)"`
	Limits         string   `envconfig:"JETRUN_LIMITS" desc:"provider limits shared by the fleet, set at start: name:requests=N,tokens=N,concurrent=N,window=1m,weight.<tenant>=N[;name:...]; each rate positive, a rate left out is not limited (docs/operations.md, Provider limits)"`
}

// LimitSpecs parses JETRUN_LIMITS.
func (c ParentWorker) LimitSpecs() ([]limits.Spec, error) {
	specs, err := limits.ParseSpecs(c.Limits)
	if err != nil {
		return nil, fmt.Errorf("JETRUN_LIMITS: %w", err)
	}
	return specs, nil
}

// Load fills spec from the environment, applies the defaults that depend on
// other settings (ApplyDefaults, for the specs that have one), and validates
// it.
func Load(spec interface{ Validate() error }) error {
	if err := envconfig.Process("", spec); err != nil { // no prefix: see Prefix
		return fmt.Errorf("config: %w", err)
	}
	if d, ok := spec.(interface{ ApplyDefaults() }); ok {
		d.ApplyDefaults()
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Usage writes every variable of spec with its default and description.
func Usage(w io.Writer, spec any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	const format = `{{range .}}  {{usage_key .}}	{{usage_default .}}	{{usage_description .}}
{{end}}`
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	if err := envconfig.Usagef("", spec, tw, format); err != nil {
		return err
	}
	return tw.Flush()
}

// ApplyDefaults sets the defaults that depend on other settings: an empty
// JETRUN_NATS_URL means the local parent-worker's embedded server (the URL
// its data directory records, else the default port), and no agent types
// (built-in, http or exec) means demo.
func (c *ChildWorker) ApplyDefaults() {
	if c.URL == "" {
		c.localNATS(&c.NATS)
	}
	if len(c.AgentTypes) == 0 && len(c.HTTPAgents) == 0 && len(c.ExecAgents) == 0 {
		c.AgentTypes = []string{demo.AgentType}
	}
}

// Validate checks the child-worker settings; it changes nothing.
func (c ChildWorker) Validate() error {
	errs := []error{c.NATS.validate(), c.Streams.validate(), c.Pool.validate(), c.Log.validate()}
	_, err := c.Configured()
	return errors.Join(append(errs, err)...)
}

// CLI is the jetrun CLI's configuration: where to connect, and the
// namespace of the streams and buckets it reads and writes.
type CLI struct {
	NATS
	Local
	Streams
	Reattach
	Log
	Retention time.Duration `envconfig:"JETRUN_RETENTION" default:"168h" desc:"jetrun mcp: the retention of parent-worker's runs, which MCP tasks give as their ttl (0: kept forever)"`
}

// ApplyDefaults sets the defaults that depend on other settings: an empty
// JETRUN_NATS_URL means the local parent-worker's embedded server (the URL
// its data directory records, else the default port).
func (c *CLI) ApplyDefaults() {
	if c.URL == "" {
		c.localNATS(&c.NATS)
	}
}

// Validate checks the settings; it changes nothing.
func (c CLI) Validate() error {
	return errors.Join(c.NATS.validate(), c.Streams.validate(), c.Log.validate())
}

// Validate checks the parent-worker settings; it changes nothing (an empty
// JETRUN_NATS_URL starts the embedded server).
func (c ParentWorker) Validate() error {
	errs := []error{c.NATS.validate(), c.Streams.validate(), c.Pool.validate(), c.Log.validate()}
	if c.URL == "" && c.DataDir == "" {
		errs = append(errs, errors.New("JETRUN_DATA_DIR is required for the embedded server"))
	}
	if c.EmbeddedPort < -1 || c.EmbeddedPort > 65535 {
		errs = append(errs, fmt.Errorf("JETRUN_EMBEDDED_PORT must be -1 or a port, got %d", c.EmbeddedPort))
	}
	if c.DemoRuns < 0 || c.DemoRuns > 1000 {
		errs = append(errs, fmt.Errorf("JETRUN_DEMO_RUNS must be between 0 and 1000, got %d", c.DemoRuns))
	}
	tokens, err := c.Tokens()
	errs = append(errs, err, httpapi.CheckListenAddr(c.HTTPAddr, len(tokens) > 0), c.Reconcile.validate())
	for _, h := range c.HTTPHosts {
		if err := httpapi.CheckAllowedHost(h); err != nil {
			errs = append(errs, fmt.Errorf("JETRUN_HTTP_ALLOWED_HOSTS: %w", err))
		}
	}
	_, err = c.Configured()
	errs = append(errs, err)
	_, err = c.LimitSpecs()
	errs = append(errs, err)
	return errors.Join(errs...)
}

// Tokens parses JETRUN_HTTP_TOKENS into token → role.
func (c *ParentWorker) Tokens() (map[string]httpapi.Role, error) {
	out := make(map[string]httpapi.Role, len(c.HTTPTokens))
	for i, pair := range c.HTTPTokens {
		name, tok, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || tok == "" {
			return nil, fmt.Errorf("JETRUN_HTTP_TOKENS: entry %d is not role=token", i+1) // never print a token
		}
		role, err := httpapi.ParseRole(name)
		if err != nil {
			return nil, fmt.Errorf("JETRUN_HTTP_TOKENS: entry %d: %w", i+1, err)
		}
		if len(tok) < 16 {
			return nil, fmt.Errorf("JETRUN_HTTP_TOKENS: entry %d: a token must be at least 16 characters", i+1)
		}
		if _, dup := out[tok]; dup {
			return nil, fmt.Errorf("JETRUN_HTTP_TOKENS: entry %d repeats a token", i+1)
		}
		out[tok] = role
	}
	return out, nil
}

func (r Reconcile) validate() error {
	var errs []error
	if r.ReconcileInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("JETRUN_RECONCILE_INTERVAL must be at least 10ms, got %s", r.ReconcileInterval))
	}
	for name, d := range map[string]time.Duration{
		"JETRUN_RETENTION": r.Retention, "JETRUN_DETACHED_MAX_BUDGET": r.DetachedMaxBudget,
		"JETRUN_DETACHED_NO_PROGRESS_BUDGET": r.DetachedNoProgress, "JETRUN_FINISH_TIMEOUT": r.FinishTimeout,
		"JETRUN_FINISH_RETRY_DELAY": r.FinishRetryDelay, "JETRUN_FINISH_UNSERVED_WAIT": r.FinishUnservedWait,
		"JETRUN_DISPATCH_UNSERVED_WAIT": r.DispatchUnservedWait,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if r.MaxRedispatches < 1 || r.FinishMaxAttempts < 1 {
		errs = append(errs, errors.New("JETRUN_MAX_REDISPATCHES and JETRUN_FINISH_MAX_ATTEMPTS must be at least 1"))
	}
	if _, err := r.Webhooks(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Webhooks parses JETRUN_FINISH_WEBHOOKS into handler name → URL.
func (r Reconcile) Webhooks() (map[string]string, error) {
	out := make(map[string]string, len(r.FinishWebhooks))
	for _, pair := range r.FinishWebhooks {
		name, url, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || url == "" {
			return nil, fmt.Errorf("JETRUN_FINISH_WEBHOOKS: %q is not name=url", pair)
		}
		if err := events.ValidateToken("handler name", name); err != nil {
			return nil, fmt.Errorf("JETRUN_FINISH_WEBHOOKS: %w", err)
		}
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return nil, fmt.Errorf("JETRUN_FINISH_WEBHOOKS: %s: %q is not an http(s) URL", name, url)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("JETRUN_FINISH_WEBHOOKS: handler %s is listed twice", name)
		}
		out[name] = url
	}
	return out, nil
}

func (s Streams) validate() error {
	_, err := events.NewNamespace(s.Prefix)
	if err != nil {
		err = fmt.Errorf("JETRUN_PREFIX: %w", err)
	}
	return errors.Join(err, s.Options().Validate())
}

func (p Pool) validate() error {
	var errs []error
	if p.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("JETRUN_CONCURRENCY must be at least 1, got %d", p.Concurrency))
	}
	if p.FleetConcurrency < 1 {
		errs = append(errs, fmt.Errorf("JETRUN_FLEET_CONCURRENCY must be at least 1, got %d", p.FleetConcurrency))
	}
	if p.Lease < worker.MinLease {
		errs = append(errs, fmt.Errorf("JETRUN_LEASE must be at least %s, got %s", worker.MinLease, p.Lease))
	}
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("JETRUN_MAX_ATTEMPTS must be at least 1, got %d", p.MaxAttempts))
	}
	if p.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("JETRUN_SHUTDOWN_TIMEOUT must not be negative, got %s", p.ShutdownTimeout))
	}
	if p.ChunkWindow < 0 {
		errs = append(errs, fmt.Errorf("JETRUN_CHUNK_WINDOW must not be negative, got %s", p.ChunkWindow))
	}
	if p.ClaimWindow < 0 || p.ClaimWindow > p.Lease/6 {
		errs = append(errs, fmt.Errorf("JETRUN_CLAIM_WINDOW must be between 0 and a sixth of JETRUN_LEASE (%s), got %s", p.Lease/6, p.ClaimWindow))
	}
	if p.MaxDepth < 1 {
		errs = append(errs, fmt.Errorf("JETRUN_MAX_DEPTH must be at least 1, got %d", p.MaxDepth))
	}
	if p.WorkerID != "" {
		if err := events.ValidateID(p.WorkerID); err != nil {
			errs = append(errs, fmt.Errorf("JETRUN_WORKER_ID: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (l Log) validate() error {
	_, err := l.Logger(io.Discard)
	return err
}

// Namespace returns the configured namespace.
func (s Streams) Namespace() events.Namespace { return events.Namespace(s.Prefix) }

// Options returns the stream options.
func (s Streams) Options() events.StreamOptions {
	return events.StreamOptions{Replicas: s.Replicas, DedupWindow: s.DedupWindow, EventsDedupWindow: s.EventsDedupWindow, EventsMaxAge: s.EventsMaxAge, DLQMaxAge: s.DLQMaxAge,
		FinishMaxAge: s.FinishMaxAge, EventsStreams: s.EventsStreams}
}

// Runtime returns the runtime configuration (jetrun.Open) of the settings.
func (s Streams) Runtime() jetrun.Config {
	return jetrun.Config{Namespace: s.Namespace(), Streams: s.Options()}
}

// WorkerConfig returns the child runtime configuration of the pool.
func (p Pool) WorkerConfig(logger *slog.Logger) worker.Config {
	return worker.Config{
		ID:               p.WorkerID,
		Concurrency:      p.Concurrency,
		FleetConcurrency: p.FleetConcurrency,
		Lease:            p.Lease,
		MaxAttempts:      p.MaxAttempts,
		MaxDepth:         p.MaxDepth,
		ChunkWindow:      cmp.Or(p.ChunkWindow, -1), // 0 turns coalescing off; worker.Config's 0 is the default
		ClaimWindow:      cmp.Or(p.ClaimWindow, -1), // 0 claims at once; worker.Config's 0 is the default
		Logger:           logger,
	}
}

// Redacted describes the connection settings without secrets.
func (n NATS) Redacted() string {
	var auth []string
	if n.Creds != "" {
		auth = append(auth, "creds")
	}
	if n.NKey != "" {
		auth = append(auth, "nkey")
	}
	if n.User != "" {
		auth = append(auth, "user")
	}
	if n.Token != "" {
		auth = append(auth, "token")
	}
	if n.TLSCert != "" {
		auth = append(auth, "tls-cert")
	}
	if len(auth) == 0 {
		return n.URL
	}
	return n.URL + " (auth: " + strings.Join(auth, ",") + ")"
}
