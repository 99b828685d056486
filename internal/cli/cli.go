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
	"syscall"

	"github.com/jetrun/jetrun/internal/config"
)

// Spec is a binary's configuration.
type Spec interface {
	Validate() error
	Logger(w io.Writer) (*slog.Logger, error)
}

// Main runs a daemon binary: it answers --help, loads spec from the
// environment, builds the logger and calls run with a context cancelled by
// the first SIGINT or SIGTERM. A second signal terminates the process at
// once. It returns the exit code.
func Main(name, about string, args []string, spec Spec, run func(ctx context.Context, logger *slog.Logger) error) int {
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
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	returned := make(chan struct{})
	defer close(returned)
	go func() {
		select {
		case <-sigs:
		case <-returned:
			return
		}
		cancel()
		select {
		case sig := <-sigs: // a second signal terminates at once
			fmt.Fprintf(os.Stderr, "%s: second %s: exiting now\n", name, sig)
			os.Exit(1)
		case <-returned:
		}
	}()
	if err := run(ctx, logger); err != nil {
		logger.Error(name+" failed", "err", err)
		return 1
	}
	return 0
}
