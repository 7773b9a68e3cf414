package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// ProcessConfig describes a server process a test runs on a loopback port that it keeps
// across restarts, so clients that know its address find it again.
type ProcessConfig struct {
	Name    string                  // for messages
	Bin     string                  // the binary's path
	Args    func(port int) []string // its command line for the port
	Env     []string                // extra KEY=VALUE environment
	Ready   func(port int) error    // nil once it serves
	Timeout time.Duration           // how long it may take to become ready
	// Listening, when set, is text the process prints once it has bound its port: it counts
	// as ready only after this run printed it, so that a foreign server that took the port
	// between two runs is never taken for it.
	Listening string
	// Credential, when set, runs the process as that user (a server that refuses to run as
	// root, started by a test that is root).
	Credential *syscall.Credential
}

// Process is a server process a test started on a free loopback port, and may kill, signal
// and start again on the same port, for fault tests: the shared dev servers must never be
// stopped, since other tests use them. RedisProcess and NATSProcess are kinds of it, and the
// e2e tests run coord serve as one. It dies with the test binary (Pdeathsig), even when a
// timeout kills that before its cleanups run.
type Process struct {
	t    testing.TB
	cfg  ProcessConfig
	port int // chosen at the first start, kept across restarts

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd exited
	out     *LogBuffer    // this run's output
	earlier string        // the output of earlier runs
}

// StartProcess starts cfg.Bin on a free loopback port and waits until it is ready; it is
// killed when the test ends.
func StartProcess(t testing.TB, cfg ProcessConfig) *Process {
	t.Helper()
	p := &Process{t: t, cfg: cfg}
	t.Cleanup(p.Stop)
	// A free port found by listening can be taken by someone else before the server binds
	// it; try a few.
	var lastErr error
	for range 5 {
		p.port = FreePort(t)
		if lastErr = p.start(); lastErr == nil {
			return p
		}
	}
	t.Fatalf("testenv: start %s: %v", cfg.Name, lastErr)
	return nil
}

// startServer looks up the binary named by envVar (default cfg.Name, then each of
// fallbacks) and starts it with StartProcess. A missing binary fails the test: a green run
// must mean the scenario ran.
func startServer(t testing.TB, cfg ProcessConfig, envVar string, fallbacks ...string) *Process {
	t.Helper()
	var err error
	for _, candidate := range append([]string{env(envVar, cfg.Name)}, fallbacks...) {
		if cfg.Bin, err = exec.LookPath(candidate); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: %s not found (%v); install it (deploy/dev/backends.sh does) or set %s", cfg.Name, err, envVar)
	}
	return StartProcess(t, cfg)
}

// Port is the loopback port the process listens on, across restarts.
func (p *Process) Port() int { return p.port }

// Running says whether the server is up: started and not stopped since (it may be paused).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// PID is the running process's id, 0 when stopped.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Output is everything the process printed, across restarts.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return p.earlier
	}
	return p.earlier + p.out.String()
}

// Stop kills the server with SIGKILL, as a crash would, and waits until it is gone; a
// paused server is killed too. Stopping a stopped server does nothing.
func (p *Process) Stop() { p.stop(syscall.SIGKILL, 0) }

// Terminate sends SIGTERM, as an orchestrator's stop does, and waits up to grace for the
// process to exit; then it kills it and says so.
func (p *Process) Terminate(grace time.Duration) error { return p.stop(syscall.SIGTERM, grace) }

func (p *Process) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	p.cmd.Process.Signal(sig)             //nolint:errcheck // it may have exited already; done tells
	p.cmd.Process.Signal(syscall.SIGCONT) //nolint:errcheck // a paused process must see the signal
	if grace <= 0 {
		<-p.done
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		p.cmd.Process.Kill() //nolint:errcheck // giving up on it
		<-p.done
		return fmt.Errorf("testenv: %s did not exit within %v of %v; killed it", p.cfg.Name, grace, sig)
	}
}

// Signal sends sig to the running process: SIGSTOP pauses it as a long GC pause or a frozen
// VM would (its connections stay open, nothing answers), SIGCONT continues it.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("testenv: %s is not running", p.cfg.Name)
	}
	return p.cmd.Process.Signal(sig)
}

// Start starts the server again on the same port and waits until it is ready. Starting a
// running server does nothing.
func (p *Process) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: restart %s on port %d: %v", p.cfg.Name, p.port, err)
	}
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	if p.out != nil {
		p.earlier += p.out.String() + "--- restart ---\n"
	}
	out := &LogBuffer{}
	p.out = out
	cmd := exec.Command(p.cfg.Bin, p.cfg.Args(p.port)...)
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Go sets the parent-death signal after the credentials, which would clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: p.cfg.Credential}
	ready := func() error {
		if p.cfg.Listening != "" && !strings.Contains(out.String(), p.cfg.Listening) {
			return fmt.Errorf("has not printed %q yet", p.cfg.Listening)
		}
		return p.cfg.Ready(p.port)
	}
	done, err := startUntilReady(cmd, fmt.Sprintf("%s on port %d", p.cfg.Name, p.port), out, ready, p.cfg.Timeout)
	if err != nil {
		return err
	}
	p.cmd, p.done = cmd, done
	return nil
}

// startUntilReady starts cmd and polls ready until it succeeds, the process exits, or timeout
// passes (then the process is killed). done is closed when the process exits. name and out
// (the process's output) make the error say what failed.
func startUntilReady(cmd *exec.Cmd, name string, out *LogBuffer, ready func() error, timeout time.Duration) (done chan struct{}, err error) {
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
