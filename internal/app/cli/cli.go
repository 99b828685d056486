// Package cli holds what the binaries' main functions share: --help, config
// loading, logging, signals and exit codes.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jetrun/jetrun/internal/app/config"
)

// Spec is a binary's configuration.
type Spec interface {
	Validate() error
	Logger(w io.Writer) (*slog.Logger, error)
}

// AbortGrace bounds how long a binary may take to stop after the second
// signal (see Main) before the process exits regardless.
const AbortGrace = 10 * time.Second

// Main runs a daemon binary: it answers --help, loads spec from the
// environment, builds the logger and calls run with two contexts: ctx is
// cancelled by the first SIGINT or SIGTERM (stop gracefully), abort by the
// second (stop now: cancel what is in flight without waiting, close what
// must be closed cleanly, return). After the second signal, the process
// exits once run returns, or after AbortGrace, or at a third signal. It
// returns the exit code: 1 when run failed or was aborted.
func Main(name, about string, args []string, spec Spec, run func(ctx, abort context.Context, logger *slog.Logger) error) int {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "help":
			fmt.Fprintf(os.Stdout, "%s: %s\n\nUsage: %s\n\nSettings (environment variables):\n", name, about, name)
			if err := config.Usage(os.Stdout, spec); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintln(os.Stdout, "\nSIGINT/SIGTERM stops gracefully; a second signal exits at once.")
			return 0
		default:
			fmt.Fprintf(os.Stderr, "%s: unexpected argument %q; settings come from the environment, see %s --help\n", name, a, name)
			return 2
		}
	}
	if err := config.Load(spec); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	logger, err := spec.Logger(os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	abort, cancelAbort := context.WithCancel(context.Background())
	defer cancelAbort()
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	returned := make(chan struct{})
	var watching sync.WaitGroup
	defer watching.Wait()
	defer close(returned)
	watching.Go(func() { watchSignals(name, logger, sigs, returned, cancel, cancelAbort) })
	err = run(ctx, abort, logger)
	if err != nil {
		logger.Error(name+" failed", "err", err)
		return 1
	}
	if abort.Err() != nil {
		return 1
	}
	return 0
}

// watchSignals cancels the graceful context at the first signal and the
// abort context at the second, then exits the process at a third signal or
// after AbortGrace, unless run has returned first.
func watchSignals(name string, logger *slog.Logger, sigs <-chan os.Signal, returned <-chan struct{}, cancel, cancelAbort context.CancelFunc) {
	select {
	case sig := <-sigs:
		logger.Info("stopping gracefully; a second signal stops at once", "signal", sig.String())
	case <-returned:
		return
	}
	cancel()
	select {
	case sig := <-sigs:
		fmt.Fprintf(os.Stderr, "%s: second %s: stopping now (exit within %s; a third signal exits at once)\n", name, sig, AbortGrace)
	case <-returned:
		return
	}
	cancelAbort()
	timer := time.NewTimer(AbortGrace)
	defer timer.Stop()
	select {
	case sig := <-sigs:
		fmt.Fprintf(os.Stderr, "%s: third %s: exiting now\n", name, sig)
	case <-timer.C:
		fmt.Fprintf(os.Stderr, "%s: not stopped within %s: exiting now\n", name, AbortGrace)
	case <-returned:
		return
	}
	os.Exit(1)
}
