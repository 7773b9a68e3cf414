package server

import (
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
)

// MaxResponseBytes is the default bound on one unary answer of a service, in bytes, in
// either encoding: a service whose answers can grow with stored data (task payloads) cuts or
// refuses an answer that would pass it, instead of building it in memory. Services whose
// answers carry no stored payloads (lock, ID) stay far below it by their request limits.
const MaxResponseBytes = 4 << 20

// bodySlack is how much a request body may exceed MaxRequestBytes: envelope prefixes, and
// gzip's few bytes of overhead on incompressible messages.
const bodySlack = 16 << 10

// errInflateLimit ends the inflation of a compressed message past the size limit: connect
// would otherwise inflate the whole message to report its size, which for a gzip bomb (1 MiB
// inflating to 1 GiB) is a fifth of a second of CPU per request.
var errInflateLimit = errors.New("server: compressed message inflates past the size limit")

// boundedGunzip is a gzip decompressor that stops after max+1 bytes: connect reads up to
// max+1 to detect an oversized message, and the next read fails instead of inflating the
// rest.
type boundedGunzip struct {
	gz        gzip.Reader
	max, left int64
}

// Read implements io.Reader.
func (d *boundedGunzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		return 0, errInflateLimit
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.gz.Read(p)
	d.left -= int64(n)
	return n, err
}

// Reset implements connect.Decompressor.
func (d *boundedGunzip) Reset(r io.Reader) error {
	d.left = d.max + 1
	return d.gz.Reset(r)
}

// Close implements connect.Decompressor.
func (d *boundedGunzip) Close() error { return d.gz.Close() }

// gzipOption replaces connect's gzip with one whose decompression stops at max bytes.
func gzipOption(max int) connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &boundedGunzip{max: int64(max)} },
		func() connect.Compressor { return gzip.NewWriter(io.Discard) })
}

// bodyLimits bounds how request bodies are read: their size (the compressed size; the
// inflated size is connect's WithReadMaxBytes) and how long they may take to arrive. A
// client that sends headers and then nothing otherwise holds its connection, a goroutine and
// a file descriptor forever. The deadline covers only the body: once it is read to its end
// the deadline is lifted, so a long server-side wait (an Acquire waiting a minute) or a
// server stream (Watch) runs as long as it needs.
type bodyLimits struct {
	maxBytes int64
	timeout  time.Duration

	mu      sync.Mutex
	pending map[*deadlineBody]struct{} // bodies still arriving, cut short at shutdown
	closing bool
}

// wrap is the middleware that applies the limits to every request of next.
func (l *bodyLimits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, l.maxBytes)
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(l.timeout)); err != nil {
			next.ServeHTTP(w, r) // a writer without deadlines (tests' recorders)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		if r.ProtoMajor == 1 {
			b.header = w.Header()
		}
		if !l.add(b) {
			b.expire()
		}
		defer l.remove(b)
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

func (l *bodyLimits) add(b *deadlineBody) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[*deadlineBody]struct{}{}
	}
	l.pending[b] = struct{}{}
	return !l.closing
}

func (l *bodyLimits) remove(b *deadlineBody) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, b)
	b.finish()
}

// shutdown ends every body still arriving and the ones that start arriving after: a
// request whose body has not arrived has not started, so nothing is lost, and the drain
// does not wait out the body timeout for it.
func (l *bodyLimits) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	for b := range l.pending {
		b.expire()
	}
}

// deadlineBody is a request body under a read deadline, lifted when the body ends.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	header http.Header // an HTTP/1 response's, to close the connection after a cut body

	mu   sync.Mutex
	done bool // read to its end, or its handler returned: the deadline is no longer ours
}

// Read implements io.Reader.
func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.header != nil {
		// A body cut by its deadline (or broken) leaves the connection in no state for
		// another request; without this it would be kept alive, for IdleTimeout, after the
		// error response.
		b.header.Set("Connection", "close")
	}
	if err == io.EOF {
		b.mu.Lock()
		if !b.done {
			b.done = true
			b.rc.SetReadDeadline(time.Time{}) //nolint:errcheck // it worked when set
		}
		b.mu.Unlock()
	}
	return n, err
}

// expire ends a body still arriving now.
func (b *deadlineBody) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.rc.SetReadDeadline(time.Now()) //nolint:errcheck // it worked when set
	}
}

// finish marks the handler returned: the response writer must not be used after.
func (b *deadlineBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
}

// defaultMaxConns is the connection limit when Config.MaxConns is 0: half the process's
// file descriptors when they are few, else all but 4096 of them, which leaves room for the
// backends' pools (Redis alone keeps up to 256 connections), so that clients can never take
// every descriptor and stop the server from accepting (accept: too many open files).
func defaultMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		return 1 << 20
	}
	n := int(lim.Cur)
	return max(n/2, n-4096)
}

// limitListener accepts at most n connections at once: past that, Accept waits until one
// closes, and new clients wait in the kernel's backlog without costing a descriptor.
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close implements net.Listener.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, at its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close implements net.Conn.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
