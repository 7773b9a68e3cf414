package testenv

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisReadyTimeout bounds how long a started redis-server may take to answer PING.
const redisReadyTimeout = 10 * time.Second

// RedisProcess is a redis-server the test started itself on a free loopback port, for fault
// tests that kill (Stop) and restart (Start) a node. It keeps nothing on disk (no RDB, no
// AOF), so a restarted node comes back empty, as a node without persistence does in
// production.
type RedisProcess struct {
	*Process
	cfg RedisConfig
}

// StartRedis starts a redis-server ($COORDKIT_TEST_REDIS_SERVER or redis-server on PATH) and
// waits until it answers PING. The process is killed when the test ends. A missing binary
// fails the test: a green run must mean the scenario ran.
func StartRedis(t testing.TB) *RedisProcess {
	t.Helper()
	return StartRedisWith(t, RedisConfig{})
}

// RedisConfig configures a redis-server started by StartRedisWith.
type RedisConfig struct {
	// Password is required of clients (requirepass), and used towards a master (masterauth).
	Password string
	// TLS, when set, makes the server accept only TLS connections, with these certificates
	// (clients need no certificate of their own).
	TLS *TLSCerts
	// ReplicaOf is a master's host:port: the server starts as its replica.
	ReplicaOf string
	// Args are further redis-server arguments, such as "--cluster-enabled", "yes".
	Args []string
}

// StartRedisWith starts a redis-server as StartRedis does, configured by cfg.
func StartRedisWith(t testing.TB, cfg RedisConfig) *RedisProcess {
	t.Helper()
	dir := t.TempDir()
	p := &RedisProcess{cfg: cfg}
	p.Process = startServer(t, ProcessConfig{
		Name: "redis-server",
		Args: func(port int) []string {
			args := []string{
				"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--daemonize", "no",
				"--dir", dir, "--logfile", ""}
			if cfg.Password != "" {
				args = append(args, "--requirepass", cfg.Password, "--masterauth", cfg.Password)
			}
			if cfg.TLS != nil {
				args = append(args, "--port", "0", "--tls-port", strconv.Itoa(port),
					"--tls-cert-file", cfg.TLS.CertFile, "--tls-key-file", cfg.TLS.KeyFile,
					"--tls-ca-cert-file", cfg.TLS.CAFile, "--tls-auth-clients", "no", "--tls-replication", "yes")
			}
			if cfg.ReplicaOf != "" {
				host, port, _ := net.SplitHostPort(cfg.ReplicaOf)
				args = append(args, "--replicaof", host, port)
			}
			return append(args, cfg.Args...)
		},
		Ready:   func(port int) error { return p.ping(loopback(port)) },
		Timeout: redisReadyTimeout,
	}, "COORDKIT_TEST_REDIS_SERVER")
	return p
}

// Addr is the node's host:port.
func (p *RedisProcess) Addr() string { return loopback(p.Port()) }

// Password is the password clients must give; empty when none.
func (p *RedisProcess) Password() string { return p.cfg.Password }

// URL is the node's redis:// URL (rediss:// with TLS), with its password.
func (p *RedisProcess) URL() string {
	scheme, user := "redis", ""
	if p.cfg.TLS != nil {
		scheme = "rediss"
	}
	if p.cfg.Password != "" {
		user = url.UserPassword("", p.cfg.Password).String() + "@"
	}
	return scheme + "://" + user + p.Addr()
}

// Client returns a client of the node (with its password and TLS), closed when the test ends.
func (p *RedisProcess) Client(t testing.TB) *redis.Client {
	o := &redis.Options{Addr: p.Addr(), Password: p.cfg.Password}
	if p.cfg.TLS != nil {
		o.TLSConfig = p.cfg.TLS.ClientConfig()
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// ping is the readiness probe of p: PING answered, or refused for want of the password
// (the server is up either way).
func (p *RedisProcess) ping(addr string) error {
	if p.cfg.TLS == nil {
		return ping(addr)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, p.cfg.TLS.ClientConfig())
	if err != nil {
		return err
	}
	return pingOn(c)
}

// ping sends one inline PING over a fresh connection, so that no client pool state is
// involved. A server that wants a password answers NOAUTH, which counts as up.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return pingOn(c)
}

func pingOn(c net.Conn) error {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a failed deadline fails the read
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
