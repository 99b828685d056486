package natstest

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// Link is a TCP link between clients and a server that a test can make
// hold back what the server sends: requests still reach the server and are
// carried out, their answers wait (a one-way network fault). A client's
// request whose answer is held past its timeout fails though the server did
// what it asked: the answer was lost. Released, the link delivers what it
// held, in order, and the connection lives on.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	after []byte // Hold once a client sends this
	conns []*linkConn
	wg    sync.WaitGroup
}

// linkConn is one client connection through the link; its mu orders the
// server's bytes to the client (held or passed on).
type linkConn struct {
	client, server net.Conn
	mu             sync.Mutex
	pending        []byte
}

// RunLink starts a link to ns on a random loopback port; it is closed at
// the test's cleanup, before ns shuts down.
func RunLink(t testing.TB, ns *server.Server) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("natstest: link: %v", err)
	}
	l := &Link{ln: ln, target: ns.Addr().String()}
	l.wg.Go(l.accept)
	t.Cleanup(l.close)
	return l
}

// URL is the nats:// address clients connect to through the link.
func (l *Link) URL() string { return "nats://" + l.ln.Addr().String() }

// Hold makes the link hold back everything the server sends until Release.
func (l *Link) Hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = true
}

// HoldAfter makes the link hold back what the server sends from the moment
// a client sends b (say "PUB $KV.jetrun_runs.r1 ": a write of row r1): the
// answer to that request is held, and everything after it, until Release.
func (l *Link) HoldAfter(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.after = append([]byte(nil), b...)
}

// Release delivers what the link held and lets the server's bytes through
// again.
func (l *Link) Release() {
	l.mu.Lock()
	l.held, l.after = false, nil
	conns := append([]*linkConn(nil), l.conns...)
	l.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		_, _ = c.client.Write(c.pending)
		c.pending = nil
		c.mu.Unlock()
	}
}

func (l *Link) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *Link) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		srv, err := net.Dial("tcp", l.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &linkConn{client: client, server: srv}
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
		l.wg.Go(func() { l.up(c) })
		l.wg.Go(func() { l.down(c) })
	}
}

// up carries a client's bytes to the server, and starts holding the
// server's before it forwards what HoldAfter waits for.
func (l *Link) up(c *linkConn) {
	defer c.server.Close()
	buf := make([]byte, 32<<10)
	var tail []byte // the end of the last read: a pattern may straddle two
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			l.mu.Lock()
			if len(l.after) > 0 {
				seen := append(tail, buf[:n]...)
				tail = append([]byte(nil), seen[max(len(seen)-len(l.after), 0):]...)
				if bytes.Contains(seen, l.after) {
					l.held, l.after = true, nil
				}
			}
			l.mu.Unlock()
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down carries the server's bytes to the client, or keeps them while the
// link holds.
func (l *Link) down(c *linkConn) {
	defer c.client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.pending = append(c.pending, buf[:n]...)
			if !l.isHeld() {
				_, _ = c.client.Write(c.pending)
				c.pending = nil
			}
			c.mu.Unlock()
		}
		if err != nil {
			return // the server or the link closed the connection
		}
	}
}

func (l *Link) close() {
	l.ln.Close()
	l.mu.Lock()
	for _, c := range l.conns {
		c.client.Close()
		c.server.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
