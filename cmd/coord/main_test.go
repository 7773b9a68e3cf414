package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
}

// serve runs `coord serve` in-process with args until the test ends, and checks that it shuts
// down cleanly when its context is canceled, as on SIGTERM.
func serve(t *testing.T, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", addr, "--data-dir", t.TempDir(), "--log-level", "warn"}, args...), io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v after shutdown, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not shut down")
		}
	})
	url := "http://" + addr
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if res, err := http.Get(url + "/metrics"); err == nil {
			res.Body.Close()
			return url
		}
	}
	t.Fatal("coord serve did not start listening")
	return ""
}

// coord runs one CLI command in-process and returns its output.
func coord(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestCLILockRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		backend string
	}{
		{name: "embedded default", backend: "sqlite"},
		{name: "redis", args: []string{"--redis-addr", testenv.RedisAddr()}, backend: "redis"},
		{name: "redlock", args: []string{"--redlock-addrs", strings.Join(testenv.RedlockAddrs(), ",")}, backend: "redlock"},
		{name: "zookeeper", args: []string{"--zk-addrs", strings.Join(testenv.ZooKeeperAddrs(), ",")}, backend: "zookeeper"},
		{name: "mysql", args: []string{"--mysql-dsn", testenv.MySQLDSN(), "--lock-scope", "cli-test"}, backend: "mysql"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testenv.Redis(t, "") // the redis case needs it; fail loudly when it is down
			url := serve(t, tt.args...)
			key := "cli:" + testenv.Prefix(t)

			out, err := coord(t, "lock", "acquire", key, "--server", url, "--ttl", "1m", "--json")
			if err != nil {
				t.Fatalf("acquire: %v\n%s", err, out)
			}
			var acq struct {
				Acquired bool
				Lease    struct{ Owner, Backend, FencingToken string }
			}
			if err := json.Unmarshal([]byte(out), &acq); err != nil || !acq.Acquired || acq.Lease.Backend != tt.backend {
				t.Fatalf("acquire --json = %s (%v), want acquired on %s", out, err, tt.backend)
			}
			if _, err := strconv.ParseUint(acq.Lease.FencingToken, 10, 64); err != nil {
				t.Fatalf("fencing token in JSON = %q, want a decimal string (64-bit numbers are strings)", acq.Lease.FencingToken)
			}

			out, err = coord(t, "lock", "acquire", "--server", url, key)
			if !errors.Is(err, errNotAcquired) || !strings.Contains(out, "not acquired") {
				t.Fatalf("second acquire = %v\n%s; want not acquired", err, out)
			}
			out, err = coord(t, "lock", "inspect", key, "--server", url)
			if err != nil || !strings.Contains(out, "is held") || !strings.Contains(out, "fencing token  "+acq.Lease.FencingToken) {
				t.Fatalf("inspect = %v\n%s", err, out)
			}
			if strings.Contains(out, acq.Lease.Owner) {
				t.Fatalf("inspect shows the owner secret:\n%s", out)
			}
			out, err = coord(t, "lock", "renew", key, "--server", url, "--owner", acq.Lease.Owner, "--ttl", "2m")
			if err != nil || !strings.Contains(out, "renewed") {
				t.Fatalf("renew = %v\n%s", err, out)
			}
			out, err = coord(t, "lock", "release", key, "--server", url, "--owner", "wrong-owner-0123456789")
			if err == nil || !strings.Contains(out+err.Error(), "permission_denied") {
				t.Fatalf("release by wrong owner = %v\n%s; want permission_denied", err, out)
			}
			out, err = coord(t, "lock", "release", key, "--server", url, "--owner", acq.Lease.Owner)
			if err != nil || !strings.Contains(out, "0 holds left") {
				t.Fatalf("release = %v\n%s", err, out)
			}
		})
	}
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "unknown default backend", args: []string{"--default-backend", "etcd"}, want: `"etcd" is not configured`},
		{name: "redis not answering", args: []string{"--redis-addr", freeAddr(t)}, want: "--redis-addr"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, want: "--log-level"},
		{name: "mysql not answering", args: []string{"--mysql-dsn", "root@tcp(" + freeAddr(t) + ")/coordkit"}, want: "--mysql-dsn"},
		{name: "worker leases on redis without redis", args: []string{"--id-worker-leases", "redis"}, want: "--redis-addr"},
		{name: "unknown worker lease store", args: []string{"--id-worker-leases", "etcd"}, want: "--id-worker-leases"},
		{name: "unknown id store", args: []string{"--id-store", "etcd"}, want: "--id-store"},
		{name: "id store mysql without mysql", args: []string{"--id-store", "mysql"}, want: "--mysql-dsn"},
		{name: "id store postgres without postgres", args: []string{"--id-store", "postgres"}, want: "--postgres-url"},
		{name: "id store auto with mysql and postgres", args: []string{"--mysql-dsn", testenv.MySQLDSN(),
			"--postgres-url", testenv.PostgresURL(), "--postgres-schema", testenv.PostgresSchema(t)}, want: "--id-store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, append([]string{"serve", "--addr", freeAddr(t), "--data-dir", t.TempDir()}, tt.args...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("serve error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestServeEnvFallback(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("COORDKIT_ADDR", addr)
	t.Setenv("COORDKIT_DATA_DIR", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, io.Discard) }()
	defer func() { cancel(); <-done }()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if res, err := http.Get("http://" + addr + "/metrics"); err == nil {
			res.Body.Close()
			return
		}
	}
	t.Fatalf("serve did not listen on COORDKIT_ADDR=%s", addr)
}
