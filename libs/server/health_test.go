package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// healthStatus asks gRPC health about service (in Connect's JSON) and returns the status,
// or the Connect code of the error.
func healthStatus(t *testing.T, base, service string) (string, connect.Code) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"service": service})
	res, err := http.Post(base+"/grpc.health.v1.Health/Check", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct{ Status, Code string }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Code != "" {
		var c connect.Code
		c.UnmarshalText([]byte(out.Code)) //nolint:errcheck // unknown stays 0
		return "", c
	}
	return out.Status, 0
}

const (
	serving    = "SERVING_STATUS_SERVING"
	notServing = "SERVING_STATUS_NOT_SERVING"
)

func TestHealthChecks(t *testing.T) {
	t.Parallel()
	var (
		down  atomic.Bool
		calls atomic.Int64
	)
	flaky := func(context.Context) error {
		calls.Add(1)
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	srv := server.New(server.Config{
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		HealthCacheTTL: 200 * time.Millisecond,
	})
	noop := http.NotFoundHandler()
	srv.Mount(server.Mount{Name: "alpha", Path: "/demo.v1.Alpha/", Handler: noop, Checks: map[string]server.Check{
		"redis": flaky, "sqlite": func(context.Context) error { return nil },
	}})
	srv.Mount(server.Mount{Name: "beta", Path: "/demo.v1.Beta/", Handler: noop, Checks: map[string]server.Check{
		"sqlite": func(context.Context) error { return nil },
	}})
	srv.Handle("/demo.v1.Gamma/", noop) // no checks: always SERVING
	addr, _ := serveOn(t, srv)
	base := "http://" + addr

	want := func(service string, status string) {
		t.Helper()
		got, err := healthStatus(t, base, service)
		if err != 0 || got != status {
			t.Errorf("health of %q = %v, %v; want %v", service, got, err, status)
		}
	}
	readyz := func(wantCode int) map[string]map[string]string {
		t.Helper()
		code, body := getStatus(t, http.DefaultClient, base+"/readyz")
		var r struct {
			Ready    bool
			Services map[string]map[string]string
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || code != wantCode || r.Ready != (wantCode == 200) {
			t.Fatalf("/readyz = %d %s (%v), want %d", code, body, err, wantCode)
		}
		return r.Services
	}

	want("", serving)
	want("demo.v1.Alpha", serving)
	want("demo.v1.Gamma", serving)
	if s := readyz(200); s["alpha"]["redis"] != "ok" || s["beta"]["sqlite"] != "ok" {
		t.Fatalf("/readyz services = %v, want every backend ok", s)
	}
	if _, err := healthStatus(t, base, "demo.v1.Nope"); err != connect.CodeNotFound {
		t.Errorf("health of an unknown service = %v, want not_found", err)
	}

	// Probes within the cache's TTL share one round of checks.
	time.Sleep(250 * time.Millisecond)
	before := calls.Load()
	for range 50 {
		want("demo.v1.Alpha", serving)
		getStatus(t, http.DefaultClient, base+"/readyz")
	}
	if n := calls.Load() - before; n > 3 {
		t.Errorf("100 probes in a burst ran the check %d times, want about 1 (cached for 200ms)", n)
	}

	down.Store(true)
	time.Sleep(250 * time.Millisecond)
	want("demo.v1.Alpha", notServing)
	want("demo.v1.Beta", serving)
	want("", notServing)
	s := readyz(503)
	if !strings.Contains(s["alpha"]["redis"], "connection refused") || s["alpha"]["sqlite"] != "ok" {
		t.Fatalf("/readyz services = %v, want alpha's redis named with its error", s)
	}
	if code, _ := getStatus(t, http.DefaultClient, base+"/healthz"); code != 200 {
		t.Errorf("/healthz with a backend down = %d, want 200: liveness ignores backends", code)
	}

	down.Store(false)
	time.Sleep(250 * time.Millisecond)
	want("", serving)
	readyz(200)
}

// TestHealthCheckTimeout checks that a backend that hangs makes its service NOT_SERVING
// within the check timeout instead of hanging the probe.
func TestHealthCheckTimeout(t *testing.T) {
	t.Parallel()
	srv := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	// Four services whose checks all hang, as on a shared Redis that stopped answering: the
	// whole-server check runs them at once, so it ends after one check timeout (2s), not four.
	for _, name := range []string{"Hang", "Hang2", "Hang3", "Hang4"} {
		srv.Mount(server.Mount{Path: "/demo.v1." + name + "/", Handler: http.NotFoundHandler(), Checks: map[string]server.Check{"redis": hang}})
	}
	addr, _ := serveOn(t, srv)
	for _, svc := range []string{"demo.v1.Hang", ""} {
		start := time.Now()
		got, err := healthStatus(t, "http://"+addr, svc)
		if err != 0 || got != notServing {
			t.Fatalf("health %q of hanging backends = %v, %v; want NOT_SERVING", svc, got, err)
		}
		if d := time.Since(start); d > 7*time.Second {
			t.Fatalf("health %q of hanging backends took %v, want about one 2s check timeout (four in series would be 8s)", svc, d)
		}
	}
}
