package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of a backend, for fault tests: Cut severs every
// connection and refuses new ones, as a network partition would; Restore heals it.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// NewProxy starts a proxy to target; it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

// Addr is the proxy's address; point the system under test at it.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every proxied connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		in.Close()
		return
	}
	p.mu.Unlock()
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	if !p.track(in, out) {
		return
	}
	go func() {
		io.Copy(out, in) //nolint:errcheck // a closed side ends the copy
		out.Close()
	}()
	io.Copy(in, out) //nolint:errcheck // a closed side ends the copy
	in.Close()
}

// track registers a connection pair, or closes both when the proxy was cut meanwhile.
func (p *Proxy) track(in, out net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		in.Close()
		out.Close()
		return false
	}
	p.conns[in] = struct{}{}
	p.conns[out] = struct{}{}
	return true
}
