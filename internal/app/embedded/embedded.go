// Package embedded starts the nats-server that parent-worker runs in-process
// when no JETRUN_NATS_URL is configured: JetStream on, file store, loopback,
// explicit limits.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultPort is the standard NATS client port the embedded server tries
// first.
const DefaultPort = 4222

// Config configures the embedded server.
type Config struct {
	StoreDir   string
	Host       string
	Port       int // -1 for a random port; DefaultPort falls back to random when busy
	MaxMemory  int64
	MaxStore   int64
	SyncAlways bool
	Logger     *slog.Logger
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	port := cfg.Port
	if port == DefaultPort && !free(cfg.Host, port) {
		cfg.Logger.Warn("port busy; the embedded nats-server takes a random port", "port", port)
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:         "jetrun-embedded",
		Host:               cfg.Host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		SyncAlways:         cfg.SyncAlways,
		NoSigs:             true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	ns.SetLoggerV2(&logAdapter{log: cfg.Logger.With("component", "nats-server")}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats-server: not ready within 30s")
	}
	return ns, nil
}

func free(host string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// logAdapter routes nats-server logs to slog. Notices are debug-level: the
// server is chatty at start-up.
type logAdapter struct{ log *slog.Logger }

func (l *logAdapter) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *logAdapter) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
