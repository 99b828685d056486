package jetruncli

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/jetrun/jetrun/internal/app/mcpserver"
)

func init() { commands["mcp"] = (*cli).mcpCmd }

// mcpCmd serves the MCP server (package mcpserver) on standard input and
// output, for MCP hosts that launch a command: every live agent type is a
// tool. It ends when the host closes standard input.
func (c *cli) mcpCmd(fs *flag.FlagSet) func(context.Context, []string) (int, error) {
	return func(ctx context.Context, args []string) (int, error) {
		if len(args) != 0 {
			return 0, usagef("takes no arguments")
		}
		s := mcpserver.New(mcpserver.Config{Client: c.client, Runs: c.runs, Runtime: c.rt, Logger: slog.New(slog.NewTextHandler(c.errw, nil)), Retention: c.retention})
		s.Start(ctx)
		defer s.Stop()
		if err := s.ServeStdio(ctx, readCloser(c.stdin), writeCloser(c.out)); err != nil {
			return 0, err
		}
		return ExitOK, nil
	}
}

// readCloser and writeCloser give the SDK's transport the closers it wants;
// the process's own streams are not closed by it.
func readCloser(r io.Reader) io.ReadCloser {
	if f, ok := r.(*os.File); ok {
		return f
	}
	return io.NopCloser(r)
}

func writeCloser(w io.Writer) io.WriteCloser {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return nopWriteCloser{w}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
