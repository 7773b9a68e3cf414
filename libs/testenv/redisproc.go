package testenv

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// redisReadyTimeout bounds how long a started redis-server may take to answer PING.
const redisReadyTimeout = 10 * time.Second

// RedisProcess is a redis-server the test started itself on a free loopback port, for fault
// tests that kill (Stop) and restart (Start) a node. It keeps nothing on disk (no RDB, no
// AOF), so a restarted node comes back empty, as a node without persistence does in
// production.
type RedisProcess struct {
	serverProcess
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
	dir := t.TempDir()
	p := &RedisProcess{serverProcess{
		name: "redis-server",
		args: func(port int) []string {
			return append([]string{
				"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--daemonize", "no",
				"--dir", dir, "--logfile", ""}, extra...)
		},
		ready:   func(port int) error { return ping(loopback(port)) },
		timeout: redisReadyTimeout,
	}}
	startServer(t, &p.serverProcess, "COORDKIT_TEST_REDIS_SERVER")
	return p
}

// Addr is the node's host:port.
func (p *RedisProcess) Addr() string { return loopback(p.port) }

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
