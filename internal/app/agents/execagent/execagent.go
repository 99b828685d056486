// Package execagent is the built-in "exec" agent type: it runs a command
// from the configuration's allowlist for each run. A dispatch never names or
// changes the command: it only supplies the input.
//
// The command gets, as the first line of its stdin, the run as JSON
// (eventline.Request: runId, agentType, attempt, input, milestones already
// reached, steps already stored, parent, parentToolCallId, depth); stdin stays open for signals.
// Every stdout line becomes a chunk (the line and its newline, as a JSON
// string), except a line starting with Marker ("@jetrun "), whose rest is
// one event of package eventline. After a wait event the worker parks the
// run until the signal arrives and writes a line {"signal": {"name",
// "payload"}} to the command's stdin.
//
// Outcomes: exit status 0 completes the run with the last result event, or
// without one, with the last output line as summary and the whole output
// as a JSON string (its tail, when that is longer than the 256 KiB limit
// once encoded). An error event ends the run with its
// text (retried as a new attempt when it says "retryable": true), whatever
// the exit status. Any other non-zero exit ends the run "error" with the
// status and the tail of stderr. An event line that breaks the format stops
// the command and ends the run "error" with the line number and reason.
//
// The command runs in its own process group. A cancel, a lease loss or a
// shutdown sends SIGTERM to the group, then SIGKILL after Grace. When the
// command exits, whatever it left running in its group is killed: a run
// leaves no process behind, and every process is reaped. A worker that
// dies (kill -9) takes the command with it: the kernel sends it SIGKILL
// (its parent-death signal), so it cannot go on beside the run's next
// attempt; processes the command started itself are then left to die of
// the closed pipes, or of their own parent-death signal.
package execagent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/jetrun/jetrun/internal/app/agents/eventline"
	"github.com/jetrun/jetrun/pkg/events"
	"github.com/jetrun/jetrun/pkg/worker"
)

// Marker starts a stdout line that carries an event.
const Marker = "@jetrun "

// Defaults used where Config leaves a field zero.
const (
	DefaultGrace   = 5 * time.Second
	DefaultMaxLine = 1 << 20
	// StderrTail is how much of the end of stderr an error keeps.
	StderrTail = 2 << 10
)

// Config configures one exec agent type.
type Config struct {
	// Path is the command, resolved with exec.LookPath when it has no slash.
	Path string
	// Args are its arguments.
	Args []string
	// Dir is its working directory (default: the worker's).
	Dir string
	// Grace is how long the command has to exit after SIGTERM before its
	// process group is killed (default 5s).
	Grace time.Duration
	// MaxLine bounds one stdout line in bytes (default 1 MiB).
	MaxLine int
}

// Validate checks that the command exists.
func (c Config) Validate() error {
	if c.Path == "" {
		return errors.New("empty command")
	}
	if _, err := exec.LookPath(c.Path); err != nil {
		return err
	}
	if c.Grace < 0 || c.MaxLine < 0 {
		return errors.New("grace and max line must not be negative")
	}
	return nil
}

// Handler returns the handler of an exec agent type.
func Handler(cfg Config) worker.Handler {
	cfg.Grace = cmp.Or(cfg.Grace, DefaultGrace)
	cfg.MaxLine = cmp.Or(cfg.MaxLine, DefaultMaxLine)
	return &handler{cfg: cfg}
}

type handler struct{ cfg Config }

// line is one stdout line, or the error that ended stdout.
type line struct {
	text []byte
	err  error
}

func (h *handler) ServeRun(ctx context.Context, run *worker.Run) (worker.Result, error) {
	first, err := eventline.NewRequest(ctx, run)
	if err != nil {
		return worker.Result{}, err
	}
	req, err := json.Marshal(first)
	if err != nil {
		return worker.Result{}, fmt.Errorf("exec agent: encode the request: %w", err)
	}
	p, err := h.start(ctx, run)
	if err != nil {
		return worker.Result{}, err
	}
	// stop ends the command early (cancel, format error, lease loss).
	stopCtx, stop := context.WithCancel(ctx)
	defer p.wait() // every goroutine and the process are done before returning
	defer stop()
	p.goStop(stopCtx, h.cfg.Grace)
	p.send(req)
	ap := eventline.NewApplier(run)
	defer func() { _ = ap.Close(ctx) }() // what an early return left held still counts

	var (
		out      strings.Builder // plain output, its tail kept
		lastLine string
		result   *worker.Result
		failure  error
		n        int
	)
	for l := range p.lines {
		if l.err != nil {
			if errors.Is(l.err, eventline.ErrTooLong) {
				stop()
				return worker.Result{}, fmt.Errorf("exec agent: %s: stdout line %d is longer than %d bytes", h.cfg.Path, n+1, h.cfg.MaxLine)
			}
			break
		}
		n++
		rest, isEvent := bytes.CutPrefix(l.text, []byte(Marker))
		if !isEvent {
			if err := ap.Flush(ctx); err != nil {
				stop()
				return worker.Result{}, err
			}
			text := string(l.text) + "\n"
			if err := run.Chunk(ctx, text); err != nil {
				stop()
				return worker.Result{}, err
			}
			out.WriteString(text)
			if out.Len() > 2*events.MaxOutputBytes {
				tail := out.String()[out.Len()-events.MaxOutputBytes:]
				out.Reset()
				out.WriteString(tail)
			}
			if t := strings.TrimSpace(string(l.text)); t != "" {
				lastLine = t
			}
			continue
		}
		ev, err := eventline.Parse(n, rest)
		if err != nil {
			stop()
			return worker.Result{}, fmt.Errorf("exec agent: %s: stdout %w", h.cfg.Path, err)
		}
		if ev.Kind != eventline.KindUsage && ev.Kind != eventline.KindStep {
			// A usage line is the step's only when the step line follows it.
			if err := ap.Flush(ctx); err != nil {
				stop()
				return worker.Result{}, err
			}
		}
		switch ev.Kind {
		case eventline.KindWait:
			payload, err := run.Wait(ctx, ev.Wait, ev.Ask...)
			if err != nil {
				stop()
				return worker.Result{}, err
			}
			msg, _ := json.Marshal(struct {
				Signal eventline.Signal `json:"signal"`
			}{eventline.Signal{Name: ev.Wait, Payload: payload}})
			p.send(msg)
		case eventline.KindCall:
			reply, err := eventline.DoCall(ctx, run, ev)
			if err != nil {
				stop()
				return worker.Result{}, err
			}
			msg, _ := json.Marshal(struct {
				Reply eventline.Reply `json:"reply"`
			}{reply})
			p.send(msg)
		case eventline.KindReserve:
			answer, err := eventline.DoReserve(ctx, run, ev)
			if err != nil {
				stop()
				return worker.Result{}, err
			}
			msg, _ := json.Marshal(struct {
				Reserved eventline.Reserved `json:"reserved"`
			}{answer})
			p.send(msg)
		case eventline.KindResult:
			result = &ev.Result
		case eventline.KindError:
			failure = eventline.Failure(ev)
		default:
			if err := ap.Apply(ctx, ev); err != nil {
				stop()
				if ctx.Err() != nil || errors.Is(err, worker.ErrLeaseLost) {
					return worker.Result{}, err
				}
				return worker.Result{}, fmt.Errorf("exec agent: %s: stdout line %d: %w", h.cfg.Path, n, err)
			}
		}
	}
	usageErr := ap.Close(ctx)
	state := p.wait()
	switch {
	case ctx.Err() != nil:
		return worker.Result{}, context.Cause(ctx)
	case usageErr != nil:
		return worker.Result{}, usageErr
	case failure != nil:
		return worker.Result{}, failure
	case state == nil:
		return worker.Result{}, fmt.Errorf("exec agent: %s: %w", h.cfg.Path, p.waitErr)
	case !state.Success():
		return worker.Result{}, fmt.Errorf("exec agent: %s: %s%s", h.cfg.Path, describe(state), p.stderrTail())
	case result != nil:
		return *result, nil
	}
	var output any
	if out.Len() > 0 {
		output = outputTail(out.String(), events.MaxOutputBytes)
	}
	if len(lastLine) > events.MaxSummaryBytes {
		lastLine = lastLine[:events.MaxSummaryBytes]
	}
	return worker.Result{Summary: lastLine, Output: output}, nil
}

// outputTail returns the longest tail of s whose encoding as a JSON string
// (as encoding/json writes it) is at most limit bytes: plain output that is
// full of quotes, control characters or invalid UTF-8 grows when encoded,
// and the run's own output must never fail it. The tail starts on a rune.
func outputTail(s string, limit int) json.RawMessage {
	enc := func(from int) json.RawMessage {
		b, _ := json.Marshal(runeFrom(s, from)) // a string always encodes
		return b
	}
	// Search the first start whose tail fits: the encoding only shrinks as
	// the start moves on, and a byte never encodes to less than a byte.
	lo, hi := max(len(s)-(limit-2), 0), len(s)
	if b := enc(lo); len(b) <= limit {
		return b
	}
	for lo+1 < hi { // enc(lo) does not fit, enc(hi) does
		mid := lo + (hi-lo)/2
		if len(enc(mid)) <= limit {
			hi = mid
		} else {
			lo = mid
		}
	}
	return enc(hi)
}

// runeFrom returns s from byte i on, moved forward to the start of a rune
// (or an invalid byte), never in the middle of one.
func runeFrom(s string, i int) string {
	end := min(i+utf8.UTFMax, len(s))
	for i < end && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

func describe(s *os.ProcessState) string {
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(s.ExitCode())
}

// process is a started command and the goroutines that serve it.
type process struct {
	cmd   *exec.Cmd
	lines chan line
	stdin chan []byte
	done  chan struct{} // closed once the command exited and was reaped

	wg      sync.WaitGroup
	once    sync.Once
	state   *os.ProcessState
	waitErr error

	mu     sync.Mutex
	stderr []byte // its tail
}

func (h *handler) start(ctx context.Context, run *worker.Run) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec agent: pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, fmt.Errorf("exec agent: pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, fmt.Errorf("exec agent: pipe: %w", err)
	}
	cmd := exec.Command(h.cfg.Path, h.cfg.Args...)
	cmd.Dir = h.cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	// Pdeathsig: the command dies with the worker, even a worker killed
	// with -9 (which cannot stop it), instead of running on, unwatched,
	// beside the next attempt of its run (see startOnOwnThread).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(childEnv(),
		"JETRUN_RUN_ID="+run.ID(), "JETRUN_AGENT_TYPE="+run.AgentType(), "JETRUN_ATTEMPT="+strconv.Itoa(run.Attempt()))
	if tc := worker.TraceContext(ctx); !tc.IsZero() { // the names OpenTelemetry's environment carrier reads
		cmd.Env = append(cmd.Env, "TRACEPARENT="+tc.TraceParent)
		if tc.TraceState != "" {
			cmd.Env = append(cmd.Env, "TRACESTATE="+tc.TraceState)
		}
	}
	p := &process{cmd: cmd, lines: make(chan line), stdin: make(chan []byte, 4), done: make(chan struct{})}
	err = p.startOnOwnThread()
	closeAll(inR, outW, errW) // the child's ends
	if err != nil {
		closeAll(inW, outR, errR)
		return nil, fmt.Errorf("exec agent: start %s: %w", h.cfg.Path, err)
	}
	p.wg.Go(func() { // stdout
		defer outR.Close()
		defer close(p.lines)
		lr := eventline.NewReader(outR, h.cfg.MaxLine)
		for {
			text, err := lr.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					p.lines <- line{err: err}
					// Drain, so the command is never blocked writing to a full pipe.
					_, _ = io.Copy(io.Discard, outR)
				}
				return
			}
			p.lines <- line{text: bytes.Clone(text)}
		}
	})
	p.wg.Go(func() { // stderr: keep the tail
		defer errR.Close()
		buf := make([]byte, 4096)
		for {
			n, err := errR.Read(buf)
			p.mu.Lock()
			p.stderr = append(p.stderr, buf[:n]...)
			if len(p.stderr) > 2*StderrTail {
				p.stderr = append(p.stderr[:0], p.stderr[len(p.stderr)-StderrTail:]...)
			}
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	p.wg.Go(func() { // stdin: the request, then signals
		defer inW.Close()
		for {
			select {
			case msg := <-p.stdin:
				if _, err := inW.Write(append(msg, '\n')); err != nil {
					return // the command closed its stdin or exited
				}
			case <-p.done:
				return
			}
		}
	})
	return p, nil
}

// startOnOwnThread starts the command from a goroutine locked to its OS
// thread, which then reaps it. Linux sends the parent-death signal when
// the thread that started the child exits, not only the process: Go ends
// a thread when a goroutine locked to it returns, so an unlocked start
// could land on a thread some other locked goroutine ends later, and the
// command would be killed under a live worker. Here the thread lives until
// the command is reaped (its wait blocks a thread anyway) and ends with
// the goroutine.
func (p *process) startOnOwnThread() error {
	started := make(chan error, 1)
	p.wg.Go(func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.reap()
	})
	return <-started
}

// reap waits for the command to exit, kills whatever it left in its group,
// and reaps it.
func (p *process) reap() {
	pid := p.cmd.Process.Pid
	var info unix.Siginfo
	for {
		// Wait for the exit without reaping, so the group id cannot be
		// reused before its leftovers are killed.
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // whatever it left in its group
	err := p.cmd.Wait()
	p.state, p.waitErr = p.cmd.ProcessState, err
	close(p.done)
}

// send queues a line for the command's stdin.
func (p *process) send(msg []byte) {
	select {
	case p.stdin <- msg:
	case <-p.done:
	}
}

// goStop terminates the command's group when ctx ends before it exits:
// SIGTERM, then SIGKILL after grace.
func (p *process) goStop(ctx context.Context, grace time.Duration) {
	p.wg.Go(func() {
		select {
		case <-p.done:
			return
		case <-ctx.Done():
		}
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}

// wait returns once the command exited and every goroutine ended; it
// drains stdout lines nobody reads any more.
func (p *process) wait() *os.ProcessState {
	p.once.Do(func() {
		for range p.lines {
		}
		<-p.done
		p.wg.Wait()
	})
	return p.state
}

func (p *process) stderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	tail := p.stderr
	if len(tail) > StderrTail {
		tail = tail[len(tail)-StderrTail:]
	}
	s := strings.TrimSpace(string(tail))
	if s == "" {
		return ""
	}
	return ": " + s
}

// childEnv is the worker's environment without JETRUN_* variables, which
// may hold credentials.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETRUN_") {
			env = append(env, kv)
		}
	}
	return env
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
