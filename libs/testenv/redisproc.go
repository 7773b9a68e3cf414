package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// redisReadyTimeout bounds how long a started redis-server may take to answer PING.
const redisReadyTimeout = 10 * time.Second

// RedisProcess is a redis-server the test started itself on a free loopback port, for fault
// tests that kill and restart a node: the shared dev Redis nodes must never be stopped, since
// other tests use them. It keeps nothing on disk (no RDB, no AOF), so a restarted node comes
// back empty, as a node without persistence does in production.
type RedisProcess struct {
	t     testing.TB
	bin   string
	dir   string
	port  int
	extra []string // more redis-server arguments

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	out  *syncBuffer   // the server's log, for failure messages
}

// StartRedis starts a redis-server ($COORDKIT_TEST_REDIS_SERVER or redis-server on PATH) and
// waits until it answers PING. The process is killed when the test ends. A missing binary
// fails the test: a green run must mean the scenario ran.
func StartRedis(t testing.TB) *RedisProcess {
	t.Helper()
	return startRedis(t)
}

func startRedis(t testing.TB, extra ...string) *RedisProcess {
	t.Helper()
	bin, err := exec.LookPath(env("COORDKIT_TEST_REDIS_SERVER", "redis-server"))
	if err != nil {
		t.Fatalf("testenv: redis-server not found (%v); install it (deploy/dev/backends.sh does) or set COORDKIT_TEST_REDIS_SERVER", err)
	}
	p := &RedisProcess{t: t, bin: bin, dir: t.TempDir(), extra: extra}
	t.Cleanup(p.Stop)
	// A free port found by listening can be taken by someone else before redis-server binds
	// it; try a few.
	var lastErr error
	for range 5 {
		p.port = FreePort(t)
		if lastErr = p.start(); lastErr == nil {
			return p
		}
	}
	t.Fatalf("testenv: start redis-server: %v", lastErr)
	return nil
}

// Addr is the node's host:port.
func (p *RedisProcess) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Running says whether the server is up: started and not stopped since.
func (p *RedisProcess) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Stop kills the server with SIGKILL, as a crash would, and waits until it is gone. Stopping
// a stopped server does nothing.
func (p *RedisProcess) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill() //nolint:errcheck // it may have exited already; done tells
	<-p.done
	p.cmd = nil
}

// Start starts the server again on the same port, empty, and waits until it answers PING.
// Starting a running server does nothing.
func (p *RedisProcess) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: restart redis-server on %s: %v", p.Addr(), err)
	}
}

func (p *RedisProcess) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	p.out = &syncBuffer{}
	args := append([]string{
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", p.dir, "--logfile", ""}, p.extra...)
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	done, err := startUntilReady(cmd, fmt.Sprintf("redis-server on port %d", p.port), p.out,
		func() error { return ping(p.Addr()) }, redisReadyTimeout)
	if err != nil {
		return err
	}
	p.cmd, p.done = cmd, done
	return nil
}

// ping sends one inline PING over a fresh connection, so that no client pool state is involved.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a failed deadline fails the read
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
