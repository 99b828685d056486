package httpapi

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Guard refuses, before anything else looks at it, a request a web page
// of another site may have sent the browser on its way to the API, with
// or without tokens:
//
//   - DNS rebinding: a Host that is neither an IP address, "localhost", the
//     host of the listen address nor one of AllowedHosts (403
//     host_not_allowed). A page of evil.example whose name was re-pointed
//     at 127.0.0.1 sends "Host: evil.example".
//   - Cross-site requests: Sec-Fetch-Site cross-site or same-site (another
//     port of localhost is the same site), or, from a browser that sends
//     no Sec-Fetch-Site, an Origin other than the Host (403 cross_site). A
//     top-level navigation (a link to a run's page) is let through: it
//     changes nothing and the page that made it cannot read the answer.
//     Requests without these headers (curl, programs) pass.
//   - A write (any method but GET, HEAD and OPTIONS) whose Content-Type is
//     not application/json (415 unsupported_media_type): a page can send
//     text/plain or a form to another site without asking, never JSON.
//
// It wraps the whole API; an endpoint served beside it (an MCP endpoint)
// shares it by being wrapped too.
type Guard struct {
	hosts map[string]bool // lower case, without port
}

// NewGuard returns the guard of an API listening on addr (its host, when a
// name, is allowed) that is also reached under the host names allowed
// (JETRUN_HTTP_ALLOWED_HOSTS; each a name without port, any port goes).
func NewGuard(addr string, allowed []string) *Guard {
	g := &Guard{hosts: map[string]bool{"localhost": true}}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		g.hosts[normalHost(host)] = true
	}
	for _, h := range allowed {
		g.hosts[normalHost(h)] = true
	}
	return g
}

// CheckAllowedHost tells whether h can be an entry of
// JETRUN_HTTP_ALLOWED_HOSTS: a host name or IP address, without scheme,
// port or path.
func CheckAllowedHost(h string) error {
	if h == "" || strings.ContainsAny(h, ":/ @*?#") {
		return fmt.Errorf("%q is not a host name (no scheme, port or path; IPv6 addresses are always allowed)", h)
	}
	return nil
}

// normalHost lower-cases host and drops a root dot ("localhost.").
func normalHost(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// Wrap returns next behind the guard.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.checkHost(r.Host); err != "" {
			writeError(w, http.StatusForbidden, "host_not_allowed", err)
			return
		}
		if why := crossSite(r); why != "" {
			writeError(w, http.StatusForbidden, "cross_site", "cross-site request refused: "+why)
			return
		}
		if why := notJSON(r); why != "" {
			writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", why)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkHost returns why a request for hostport is refused, or "".
func (g *Guard) checkHost(hostport string) string {
	if hostport == "" {
		return "" // HTTP/1.0 without Host: not a browser
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	// An IP address names no DNS record another site could re-point.
	if net.ParseIP(host) != nil || g.hosts[normalHost(host)] {
		return ""
	}
	return fmt.Sprintf("Host %q is not allowed: this API answers to localhost, IP addresses, its listen address "+
		"and JETRUN_HTTP_ALLOWED_HOSTS (a page of another site re-pointing its name at this server sends its own name)", hostport)
}

// crossSite returns why r looks sent by a page of another site, or "".
func crossSite(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		switch {
		case site == "same-origin", site == "none": // this server's pages; typed or bookmarked
			return ""
		case (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
			r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document":
			return "" // a link followed: the page that had it cannot read what it opens
		}
		return fmt.Sprintf("Sec-Fetch-Site is %s (this API takes requests from its own pages or from programs)", site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host) {
		return ""
	}
	return fmt.Sprintf("Origin %q is not this server (%s)", origin, r.Host)
}

// notJSON returns why a write r is refused for its Content-Type, or "".
func notJSON(r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return ""
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return ""
	}
	if ct == "" {
		ct = "none"
	}
	return fmt.Sprintf("%s needs Content-Type: application/json, even without a body (got %s; curl: -H 'Content-Type: application/json')",
		r.Method, ct)
}
