package limits

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetrun/jetrun/pkg/events"
)

// Defaults of a Spec's zero fields.
const (
	// DefaultWindow is the window of a limit's request and token rates.
	DefaultWindow = time.Minute
	// MaxRate bounds every rate of a Spec and every reservation: anything
	// larger is a typo, not a provider's limit.
	MaxRate = int64(1) << 40
	// MaxWeight bounds a tenant's weight.
	MaxWeight = 1000
)

// Errors the package returns, wrapped with what was asked.
var (
	// ErrBadSpec is returned by Spec.Validate and ParseSpecs.
	ErrBadSpec = errors.New("bad limit")
	// ErrUnknownLimit is returned by Reserve for a name no Spec is stored
	// under; the message names the configured limits.
	ErrUnknownLimit = errors.New("unknown limit")
	// ErrBadReservation is returned by Reserve for an amount that is
	// negative or larger than the limit can ever grant.
	ErrBadReservation = errors.New("bad reservation")
)

// Spec is one named limit. A zero Requests, Tokens or Concurrent leaves
// that dimension unlimited; at least one must be set. Weights are the
// tenants' weights in the fair share of waiting reservations (a tenant not
// named weighs 1).
type Spec struct {
	Name       string         `json:"name"`
	Requests   int64          `json:"requests,omitempty"`   // per window
	Tokens     int64          `json:"tokens,omitempty"`     // input+output per window
	Concurrent int64          `json:"concurrent,omitempty"` // calls at once
	WindowMs   int64          `json:"windowMs,omitempty"`   // 0: DefaultWindow
	Weights    map[string]int `json:"weights,omitempty"`
}

// Window returns the spec's window length.
func (s Spec) Window() time.Duration {
	if s.WindowMs <= 0 {
		return DefaultWindow
	}
	return time.Duration(s.WindowMs) * time.Millisecond
}

// Weight returns tenant's weight.
func (s Spec) Weight(tenant string) int {
	if w := s.Weights[tenant]; w > 0 {
		return w
	}
	return 1
}

// Validate reports every problem of s at once.
func (s Spec) Validate() error {
	var errs []error
	if err := events.ValidateToken("limit name", s.Name); err != nil {
		errs = append(errs, err)
	}
	rate := func(what string, v int64) {
		switch {
		case v < 0:
			errs = append(errs, fmt.Errorf("%s is %d; a rate must be positive (leave it out to not limit %s)", what, v, what))
		case v > MaxRate:
			errs = append(errs, fmt.Errorf("%s is %d; the most is %d", what, v, MaxRate))
		}
	}
	rate("requests", s.Requests)
	rate("tokens", s.Tokens)
	rate("concurrent", s.Concurrent)
	if s.Requests == 0 && s.Tokens == 0 && s.Concurrent == 0 {
		errs = append(errs, errors.New("no rate set: give requests, tokens or concurrent, each positive"))
	}
	if s.WindowMs < 0 || s.WindowMs > int64(24*time.Hour/time.Millisecond) {
		errs = append(errs, fmt.Errorf("windowMs is %d; it must be between 1 and 86400000 (0: a minute)", s.WindowMs))
	}
	for _, t := range slices.Sorted(maps.Keys(s.Weights)) {
		if err := events.ValidateToken("tenant", t); err != nil {
			errs = append(errs, err)
		}
		if w := s.Weights[t]; w < 1 || w > MaxWeight {
			errs = append(errs, fmt.Errorf("weight of tenant %s is %d; it must be between 1 and %d", t, w, MaxWeight))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w %s: %w", ErrBadSpec, s.Name, err)
	}
	return nil
}

// ParseSpecs parses limits written as in JETRUN_LIMITS:
// "name:requests=500,tokens=200000,concurrent=50,window=1m,weight.acme=3;other:…".
// An explicit zero is an error (leave the field out instead).
func ParseSpecs(s string) ([]Spec, error) {
	var specs []Spec
	var errs []error
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		spec, err := parseSpec(part)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if slices.ContainsFunc(specs, func(o Spec) bool { return o.Name == spec.Name }) {
			errs = append(errs, fmt.Errorf("%w %s: named twice", ErrBadSpec, spec.Name))
			continue
		}
		specs = append(specs, spec)
	}
	return specs, errors.Join(errs...)
}

func parseSpec(part string) (Spec, error) {
	name, fields, ok := strings.Cut(part, ":")
	spec := Spec{Name: strings.TrimSpace(name)}
	if !ok {
		return spec, fmt.Errorf("%w %q: want name:requests=N,tokens=N,concurrent=N,window=D", ErrBadSpec, part)
	}
	var errs []error
	for f := range strings.SplitSeq(fields, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(f), "=")
		if err := spec.set(key, val); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return spec, fmt.Errorf("%w %s: %w", ErrBadSpec, spec.Name, err)
	}
	return spec, spec.Validate()
}

func (s *Spec) set(key, val string) error {
	if key == "window" {
		d, err := time.ParseDuration(val)
		if err != nil || d < time.Millisecond {
			return fmt.Errorf("window %q: want a duration of at least 1ms, such as 1m", val)
		}
		s.WindowMs = d.Milliseconds()
		return nil
	}
	n, err := strconv.ParseInt(val, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("%s=%q: want a positive whole number (leave it out to not limit it)", key, val)
	}
	if tenant, ok := strings.CutPrefix(key, "weight."); ok {
		if s.Weights == nil {
			s.Weights = map[string]int{}
		}
		s.Weights[tenant] = int(min(n, MaxWeight+1))
		return nil
	}
	switch key {
	case "requests":
		s.Requests = n
	case "tokens":
		s.Tokens = n
	case "concurrent":
		s.Concurrent = n
	default:
		return fmt.Errorf("unknown field %q (requests, tokens, concurrent, window, weight.<tenant>)", key)
	}
	return nil
}
