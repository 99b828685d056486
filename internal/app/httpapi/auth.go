package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Role is what a bearer token may do.
type Role int

// The roles, each allowing what the one before it does.
const (
	// RoleRead reads: lists, rows, events, the live feed.
	RoleRead Role = iota + 1
	// RoleWrite also dispatches, cancels, signals and clears.
	RoleWrite
)

// ParseRole returns the role named "read" or "write".
func ParseRole(s string) (Role, error) {
	switch s {
	case "read":
		return RoleRead, nil
	case "write":
		return RoleWrite, nil
	}
	return 0, fmt.Errorf("role %q is neither read nor write", s)
}

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	}
	return "none"
}

// TokenCookie is the cookie the web UI keeps a token in once it was
// entered (POST /v1/session). It is HttpOnly and SameSite=Strict: another
// site can neither read it nor make the browser send it.
const TokenCookie = "jetrun_token"

// tokens checks bearer tokens. An empty set lets every request through:
// parent-worker then listens on loopback only (CheckListenAddr).
type tokens struct {
	sums  [][sha256.Size]byte // hashed, so comparing takes the same time for every token
	roles []Role
}

func newTokens(byToken map[string]Role) *tokens {
	t := &tokens{}
	for tok, role := range byToken {
		t.sums = append(t.sums, sha256.Sum256([]byte(tok)))
		t.roles = append(t.roles, role)
	}
	return t
}

func (t *tokens) enabled() bool { return len(t.sums) > 0 }

// role returns the role of tok, or 0 for an unknown token.
func (t *tokens) role(tok string) Role {
	sum := sha256.Sum256([]byte(tok))
	var role Role
	for i := range t.sums {
		if subtle.ConstantTimeCompare(sum[:], t.sums[i][:]) == 1 {
			role = t.roles[i]
		}
	}
	return role
}

// needs is the role a request needs: nothing for health and the UI's static
// pages (they hold no data), read for other reads, write for MCP and the
// rest.
func needs(r *http.Request) Role {
	path := r.URL.Path
	switch {
	case path == "/healthz", r.Method == http.MethodPost && path == "/v1/session":
		return 0
	case path == MCPPath:
		return RoleWrite
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		if strings.HasPrefix(path, "/v1/") || path == "/metrics" {
			return RoleRead
		}
		return 0
	}
	return RoleWrite
}

// authorize wraps next with bearer-token checks. A token comes in an
// "Authorization: Bearer" header or, for the web UI, in TokenCookie (the
// Guard in front refuses what another site's page sends).
func (t *tokens) authorize(next http.Handler) http.Handler {
	if !t.enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := needs(r)
		if need == 0 {
			next.ServeHTTP(w, r)
			return
		}
		tok := bearer(r)
		if tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="jetrun"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "a bearer token is required (Authorization: Bearer <token>)")
			return
		}
		role := t.role(tok)
		switch {
		case role == 0:
			w.Header().Set("WWW-Authenticate", `Bearer realm="jetrun", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "the bearer token is not valid")
		case role < need:
			writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("this needs a %s token; yours is %s", need, role))
		default:
			next.ServeHTTP(w, r.WithContext(withCallerToken(r.Context(), tok)))
		}
	})
}

// guard returns snapshot for requests that may read runs, and an error for
// the others: with tokens, the page at / carries the runs list only for a
// caller whose token (the session cookie) may read it; the others get the
// bare page, which asks for a token.
func (t *tokens) guard(snapshot func(*http.Request) (any, error)) func(*http.Request) (any, error) {
	if !t.enabled() {
		return snapshot
	}
	return func(r *http.Request) (any, error) {
		if tok := bearer(r); tok == "" || t.role(tok) < RoleRead {
			return nil, errNoReadToken
		}
		return snapshot(r)
	}
}

var errNoReadToken = errors.New("no read token: the page carries no runs")

// bearer returns the request's token: from the Authorization header, else
// from the cookie.
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if c, err := r.Cookie(TokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// session handles POST /v1/session {"token": "..."}: a valid token is kept
// in TokenCookie for the browser session. DELETE forgets it.
func (t *tokens) session(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		http.SetCookie(w, &http.Cookie{Name: TokenCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "body must be {\"token\": \"...\"}")
		return
	}
	role := RoleWrite // without tokens every caller may do everything
	if t.enabled() {
		if role = t.role(body.Token); role == 0 {
			writeError(w, http.StatusUnauthorized, "unauthorized", "the token is not valid")
			return
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: TokenCookie, Value: body.Token, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	writeJSON(w, http.StatusOK, map[string]string{"role": role.String()})
}

// CheckListenAddr refuses an HTTP API without tokens on an address other
// hosts can reach: without tokens anyone who reaches it could dispatch,
// cancel and clear.
func CheckListenAddr(addr string, haveTokens bool) error {
	if haveTokens || addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errors.New("the HTTP API would listen on " + addr + ", which is not a loopback address, without tokens: " +
		"set JETRUN_HTTP_TOKENS (write=<token>,read=<token>) or listen on 127.0.0.1")
}
