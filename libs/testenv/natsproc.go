package testenv

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// natsReadyTimeout bounds how long a started nats-server may take to greet a client.
const natsReadyTimeout = 10 * time.Second

// NATSURL is the shared NATS the tests use ($COORDKIT_TEST_NATS_URL, default the dev one on
// 127.0.0.1:4222).
func NATSURL() string { return env("COORDKIT_TEST_NATS_URL", "nats://127.0.0.1:4222") }

// NATSProcess is a nats-server the test started itself on a free loopback port, for fault
// tests that kill (Stop) and restart (Start) it: the shared NATS must never be stopped.
type NATSProcess struct {
	*Process
}

// StartNATS starts a nats-server ($COORDKIT_TEST_NATS_SERVER, nats-server on PATH, or
// Debian's /usr/sbin/nats-server) and waits until it greets a client. It is killed when the
// test ends. A missing binary fails the test.
func StartNATS(t testing.TB) *NATSProcess {
	t.Helper()
	return &NATSProcess{startServer(t, ProcessConfig{
		Name:    "nats-server",
		Args:    func(port int) []string { return []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port)} },
		Ready:   func(port int) error { return natsGreets(loopback(port)) },
		Timeout: natsReadyTimeout,
	}, "COORDKIT_TEST_NATS_SERVER", "/usr/sbin/nats-server")}
}

// URL is the server's client URL.
func (p *NATSProcess) URL() string { return "nats://" + loopback(p.Port()) }

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
