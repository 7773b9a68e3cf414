package testenv

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// natsReadyTimeout bounds how long a started nats-server may take to greet a client.
const natsReadyTimeout = 10 * time.Second

// NATSURL is the shared NATS the tests use ($COORDKIT_TEST_NATS_URL, default the dev one on
// 127.0.0.1:4222).
func NATSURL() string { return env("COORDKIT_TEST_NATS_URL", "nats://127.0.0.1:4222") }

// NATSProcess is a nats-server the test started itself on a free loopback port, for fault
// tests that kill and restart it: the shared NATS must never be stopped.
type NATSProcess struct {
	t    testing.TB
	bin  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

// StartNATS starts a nats-server ($COORDKIT_TEST_NATS_SERVER or nats-server on PATH or in
// /usr/sbin) and waits until it greets a client. It is killed when the test ends. A missing
// binary fails the test.
func StartNATS(t testing.TB) *NATSProcess {
	t.Helper()
	bin, err := exec.LookPath(env("COORDKIT_TEST_NATS_SERVER", "nats-server"))
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/nats-server"); err != nil {
			t.Fatalf("testenv: nats-server not found (%v); install it (deploy/dev/backends.sh does) or set COORDKIT_TEST_NATS_SERVER", err)
		}
	}
	p := &NATSProcess{t: t, bin: bin}
	t.Cleanup(p.Stop)
	var lastErr error
	for range 5 {
		p.port = FreePort(t)
		if lastErr = p.start(); lastErr == nil {
			return p
		}
	}
	t.Fatalf("testenv: start nats-server: %v", lastErr)
	return nil
}

// URL is the server's client URL.
func (p *NATSProcess) URL() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

// Stop kills the server with SIGKILL and waits until it is gone; stopping a stopped server
// does nothing.
func (p *NATSProcess) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill() //nolint:errcheck // it may have exited already; done tells
	<-p.done
	p.cmd = nil
}

// Start starts the server again on the same port; starting a running server does nothing.
func (p *NATSProcess) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: restart nats-server on port %d: %v", p.port, err)
	}
}

func (p *NATSProcess) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	p.out = &syncBuffer{}
	cmd := exec.Command(p.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(p.port))
	cmd.Stdout, cmd.Stderr = p.out, p.out
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	done, err := startUntilReady(cmd, fmt.Sprintf("nats-server on port %d", p.port), p.out,
		func() error { return natsGreets(addr) }, natsReadyTimeout)
	if err != nil {
		return err
	}
	p.cmd, p.done = cmd, done
	return nil
}

// natsGreets dials addr and reads the server's INFO line.
func natsGreets(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a failed deadline fails the read
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "INFO" {
		return fmt.Errorf("greeted with %q", buf)
	}
	return nil
}
