package testenv

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of a backend, for fault tests: Cut severs every
// connection and refuses new ones, as a network partition would; Restore heals it. Stall holds
// every byte in flight, as a congested or black-holed path does, and Resume delivers them.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	// stalled is open while traffic is held and closed by Resume; nil when flowing.
	stalled chan struct{}
	// severed is closed by Cut, so that copies held by Stall end with their connections.
	severed chan struct{}
}

// NewProxy starts a proxy to target; it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), severed: make(chan struct{})}
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
	close(p.severed)
	p.severed = make(chan struct{})
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Stall holds all traffic, in both directions and on new connections too, without closing
// anything: callers see no error, only silence, until Resume delivers what was held, as
// after a long network stall. Cut still severs stalled connections.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume ends a Stall and delivers the traffic it held.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
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
	severed, ok := p.track(in, out)
	if !ok {
		return
	}
	go func() {
		p.copy(out, in, severed)
		out.Close()
	}()
	p.copy(in, out, severed)
	in.Close()
}

// copy forwards src to dst until either side closes, holding each chunk while the proxy is
// stalled. It returns when severed closes during a stall, since nothing will be delivered.
func (p *Proxy) copy(dst, src net.Conn, severed <-chan struct{}) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			stalled := p.stalled
			p.mu.Unlock()
			if stalled != nil {
				select {
				case <-stalled:
				case <-severed:
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// track registers a connection pair and returns the channel the next Cut closes, or closes
// both when the proxy was cut meanwhile.
func (p *Proxy) track(in, out net.Conn) (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		in.Close()
		out.Close()
		return nil, false
	}
	p.conns[in] = struct{}{}
	p.conns[out] = struct{}{}
	return p.severed, true
}
