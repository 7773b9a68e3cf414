package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
)

// TestServerBootstrap serves a mounted path and checks everything the bootstrap adds on the
// same port: gRPC health, reflection over h2c, /metrics, and a clean shutdown.
func TestServerBootstrap(t *testing.T) {
	t.Parallel()
	srv := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv.Handle("/demo.v1.DemoService/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	res, err := http.Post(url+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{"service":"demo.v1.DemoService"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "SERVING_STATUS_SERVING") {
		t.Fatalf("health check = %d %s, want SERVING", res.StatusCode, body)
	}

	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: p}}
	stream := grpcreflect.NewClient(h2c, url, connect.WithGRPC()).NewStream(ctx)
	names, err := stream.ListServices()
	stream.Close()
	if err != nil {
		t.Fatalf("reflection over h2c: %v", err)
	}
	if !slices.Contains(names, "demo.v1.DemoService") {
		t.Fatalf("reflection lists %v, want demo.v1.DemoService", names)
	}

	res, err = http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("/metrics lacks the Go collector:\n%.300s", body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after shutdown = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}
