package testenv

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of a backend, for fault tests: Cut severs every
// connection and refuses new ones, as a network partition would; Restore heals it. Stall holds
// every byte in flight, as a congested or black-holed path does, and Resume delivers them;
// StallOpen does so only on the connections open at the time, as when a NAT or load balancer
// loses their state while new connections pass.
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
	links   map[*link]struct{}
}

// link is one proxied connection pair.
type link struct {
	severed <-chan struct{}
	// stalled is open while StallOpen holds this link's traffic; nil when flowing. Under
	// Proxy.mu.
	stalled chan struct{}
}

// NewProxy starts a proxy to target; it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{
		ln: ln, target: target, conns: make(map[net.Conn]struct{}),
		severed: make(chan struct{}), links: make(map[*link]struct{}),
	}
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

// StallOpen holds the traffic of the connections open now, as Stall does, while new
// connections pass; Resume delivers it.
func (p *Proxy) StallOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		if l.stalled == nil {
			l.stalled = make(chan struct{})
		}
	}
}

// Resume ends a Stall or StallOpen and delivers the traffic it held.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	for l := range p.links {
		if l.stalled != nil {
			close(l.stalled)
			l.stalled = nil
		}
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
	l, ok := p.track(in, out)
	if !ok {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		p.copy(out, in, l)
		out.Close()
	})
	p.copy(in, out, l)
	in.Close()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// copy forwards src to dst until either side closes, holding each chunk while the proxy or
// the link is stalled. It returns when the link is severed during a stall, since nothing
// will be delivered.
func (p *Proxy) copy(dst, src net.Conn, l *link) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for stalled := p.gate(l); stalled != nil; stalled = p.gate(l) {
				select {
				case <-stalled:
				case <-l.severed:
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

// gate is what l's traffic waits for, or nil when it may flow.
func (p *Proxy) gate(l *link) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		return p.stalled
	}
	return l.stalled
}

// track registers a connection pair as a link that the next Cut severs, or closes both when
// the proxy was cut meanwhile.
func (p *Proxy) track(in, out net.Conn) (*link, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		in.Close()
		out.Close()
		return nil, false
	}
	p.conns[in] = struct{}{}
	p.conns[out] = struct{}{}
	l := &link{severed: p.severed}
	p.links[l] = struct{}{}
	return l, true
}
