// Package natsconn opens the binaries' NATS connections: named, reconnecting
// forever with backoff, authenticated as configured, with connection events
// logged.
package natsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/app/config"
)

// Connect dials the configured servers. The connection keeps reconnecting
// after a loss; JetStream calls fail in the meantime and are retried by
// their callers.
func Connect(cfg config.NATS, name string, logger *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			if subject, ok := dispatchConsumerCreate(err); ok {
				// Expected: a child-worker tries to create a missing
				// dispatch consumer, and waits for a parent-worker to.
				logger.Info("this user may not create dispatch consumers: a parent-worker creates them "+
					"(docs/operations.md, What each role can do)", "subject", subject)
				return
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				// The server refused a publish or subscription this
				// user may not make: a request waiting on it times out,
				// so say here what was refused (nats.conf, the roles in
				// docs/operations.md).
				logger.Error("nats refused a publish or subscription: permissions violation; check this user's permissions (docs/operations.md, Authentication)",
					"subject", subject, "err", err)
				return
			}
			logger.Warn("nats async error", "subject", subject, "err", err)
		}),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.NKey != "" {
		opt, err := nats.NkeyOptionFromSeed(cfg.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats: nkey seed %s: %w", cfg.NKey, err)
		}
		opts = append(opts, opt)
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	nc, err := nats.Connect(cfg.URL, append(opts, extra...)...)
	if err != nil && cfg.URLFile() != "" {
		return nil, fmt.Errorf("nats: connect to %s, read from %s (written by a parent-worker, which may have been killed; set JETRUN_NATS_URL or remove the file): %w",
			cfg.Redacted(), cfg.URLFile(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", cfg.Redacted(), err)
	}
	return nc, nil
}

// dispatchConsumerCreate reports whether err is the server refusing to
// create or update a consumer of a dispatch stream (JETRUN_DISPATCH, or its
// namesake under another prefix), and the subject refused. The server says
// so only in the error's text.
func dispatchConsumerCreate(err error) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	const to = `Publish to "`
	_, rest, ok := strings.Cut(err.Error(), to)
	if !ok {
		return "", false
	}
	subject, _, _ := strings.Cut(rest, `"`)
	tokens := strings.Split(subject, ".")
	if len(tokens) < 5 || tokens[0] != "$JS" || tokens[1] != "API" || tokens[2] != "CONSUMER" || tokens[3] != "CREATE" ||
		!strings.HasSuffix(tokens[4], "_DISPATCH") {
		return "", false
	}
	return subject, true
}
