package testenv

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/libs/server"
)

// Serve runs srv through the real bootstrap on a free loopback port, as `coord serve` does,
// and returns its base URL and a stop function that shuts it down as SIGTERM would and
// returns Serve's result. The test's cleanup stops it too; later calls return the first
// result.
func Serve(t testing.TB, srv *server.Server) (url string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("testenv: serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), stop
}
