package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port nobody listens on right now, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// loopback is 127.0.0.1:port.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// LogBuffer collects a server process's output: safe for the process's writer and the
// test's reader at once.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serverProcess is a server binary a test runs on a free loopback port and may kill and
// start again on the same port, for fault tests: the shared dev servers must never be
// stopped, since other tests use them. RedisProcess and NATSProcess are its two kinds.
type serverProcess struct {
	t       testing.TB
	name    string                  // the binary's name, for messages
	bin     string                  // its path
	port    int                     // chosen at the first start, kept across restarts
	args    func(port int) []string // its command line
	ready   func(port int) error    // nil once it serves
	timeout time.Duration           // how long it may take to become ready

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	out  *LogBuffer    // the server's output, for failure messages
}

// startServer looks up the binary named by envVar (default name, then each of fallbacks),
// starts it on a free port and waits until it is ready; it is killed when the test ends. A
// missing binary fails the test: a green run must mean the scenario ran.
func startServer(t testing.TB, p *serverProcess, envVar string, fallbacks ...string) {
	t.Helper()
	p.t = t
	var err error
	for _, candidate := range append([]string{env(envVar, p.name)}, fallbacks...) {
		if p.bin, err = exec.LookPath(candidate); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: %s not found (%v); install it (deploy/dev/backends.sh does) or set %s", p.name, err, envVar)
	}
	t.Cleanup(p.Stop)
	// A free port found by listening can be taken by someone else before the server binds
	// it; try a few.
	var lastErr error
	for range 5 {
		p.port = FreePort(t)
		if lastErr = p.start(); lastErr == nil {
			return
		}
	}
	t.Fatalf("testenv: start %s: %v", p.name, lastErr)
}

// Running says whether the server is up: started and not stopped since.
func (p *serverProcess) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Stop kills the server with SIGKILL, as a crash would, and waits until it is gone. Stopping
// a stopped server does nothing.
func (p *serverProcess) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill() //nolint:errcheck // it may have exited already; done tells
	<-p.done
	p.cmd = nil
}

// Start starts the server again on the same port and waits until it is ready. Starting a
// running server does nothing.
func (p *serverProcess) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: restart %s on port %d: %v", p.name, p.port, err)
	}
}

func (p *serverProcess) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	p.out = &LogBuffer{}
	cmd := exec.Command(p.bin, p.args(p.port)...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	done, err := StartUntilReady(cmd, fmt.Sprintf("%s on port %d", p.name, p.port), p.out,
		func() error { return p.ready(p.port) }, p.timeout)
	if err != nil {
		return err
	}
	p.cmd, p.done = cmd, done
	return nil
}

// StartUntilReady starts cmd and polls ready until it succeeds, the process exits, or timeout
// passes (then the process is killed). done is closed when the process exits. name and out
// (the process's output) make the error say what failed.
func StartUntilReady(cmd *exec.Cmd, name string, out *LogBuffer, ready func() error, timeout time.Duration) (done chan struct{}, err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done = make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // the exit is expected: the test kills it
		close(done)
	}()
	deadline := time.Now().Add(timeout)
	for {
		if err := ready(); err == nil {
			return done, nil
		}
		select {
		case <-done:
			return nil, fmt.Errorf("%s exited: %s", name, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill() //nolint:errcheck // giving up on it
			<-done
			return nil, fmt.Errorf("%s not ready within %v: %s", name, timeout, out.String())
		}
	}
}
