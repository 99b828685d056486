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
	"sync/atomic"
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
// returns the exit code: 1 when run failed; after a second signal, 128 +
// that signal's number (130 for Ctrl-C, 143 for SIGTERM), as shells report a
// process a signal ended, so a wrapper (make run) can tell a stop the user
// asked for from a failure; 0 otherwise.
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
	var (
		watching  sync.WaitGroup
		abortedBy atomic.Int32 // the second signal's exit code
	)
	defer watching.Wait()
	defer close(returned)
	watching.Go(func() {
		watchSignals(name, logger, sigs, returned, cancel, func(sig os.Signal) {
			abortedBy.Store(int32(signalExitCode(sig)))
			cancelAbort()
		})
	})
	err = run(ctx, abort, logger)
	if err != nil {
		logger.Error(name+" failed", "err", err)
	}
	switch {
	case abort.Err() != nil:
		return int(abortedBy.Load())
	case err != nil:
		return 1
	}
	return 0
}

// signalExitCode is the exit code of a process stopped by sig: 128 + its
// number (130 for SIGINT, 143 for SIGTERM), or 1 for a signal without one.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// watchSignals cancels the graceful context at the first signal and calls
// abort with the second, then exits the process at a third signal or after
// AbortGrace, unless run has returned first.
func watchSignals(name string, logger *slog.Logger, sigs <-chan os.Signal, returned <-chan struct{}, cancel context.CancelFunc, abort func(os.Signal)) {
	select {
	case sig := <-sigs:
		logger.Info("stopping gracefully; a second signal stops at once", "signal", sig.String())
	case <-returned:
		return
	}
	cancel()
	var second os.Signal
	select {
	case second = <-sigs:
		fmt.Fprintf(os.Stderr, "%s: second %s: stopping now (exit within %s; a third signal exits at once)\n", name, second, AbortGrace)
	case <-returned:
		return
	}
	abort(second)
	timer := time.NewTimer(AbortGrace)
	defer timer.Stop()
	select {
	case sig := <-sigs:
		fmt.Fprintf(os.Stderr, "%s: third %s: exiting now\n", name, sig)
		os.Exit(signalExitCode(sig))
	case <-timer.C:
		fmt.Fprintf(os.Stderr, "%s: not stopped within %s: exiting now\n", name, AbortGrace)
		os.Exit(signalExitCode(second))
	case <-returned:
	}
}
