package lock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// TestWatchNeverReadingIsCut: a watcher whose client stops reading (a 4 KiB HTTP/2 window,
// so the server's sends block at once) falls behind while events come; its stream is then
// stuck in a send, so it cannot end itself: after LaggedWatchGrace it is cut, freeing its
// goroutine and its place in the stream limits, and the client, when it reads again, gets
// an error, never a quiet end.
func TestWatchNeverReadingIsCut(t *testing.T) {
	t.Parallel()
	bus := openBus(t, event.Config{})
	srv := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	svc, err := lock.NewService(lock.Config{
		Backends: map[string]lock.Backend{"sqlite": sqliteStore(t)(t)}, Events: bus, Recheck: -1,
		LaggedWatchGrace: 300 * time.Millisecond, Registerer: srv.Registry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	srv.Handle(lockv1connect.NewLockServiceHandler(svc, srv.HandlerOptions()...))
	url, _ := testenv.Serve(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tiny := &http.Client{Transport: &http.Transport{Protocols: p, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 4096}}}
	stream, err := lockv1connect.NewLockServiceClient(tiny, url).Watch(ctx, &lockv1.WatchRequest{Prefix: "lag/"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	stream.ResponseHeader() // in force; from now on it reads nothing
	if open := metricValue(t, url, "coordkit_streams_open"); open != 1 {
		t.Fatalf("coordkit_streams_open = %v, want 1", open)
	}

	c := client.New(url)
	for round := 0; metricValue(t, url, `coordkit_lock_watch_lagged_total{backend="sqlite"}`) == 0; round++ {
		if round == 20 {
			t.Fatal("the watcher never fell behind")
		}
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				key := fmt.Sprintf("lag/%d/%d", round, w)
				for range 40 {
					l, err := acquireWithin(ctx, c, key, 30*time.Second)
					if err == nil {
						_, err = c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()})
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	for start := time.Now(); metricValue(t, url, "coordkit_streams_open") != 0; time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the watcher that fell behind and never reads still holds its stream 10s after a 300ms grace")
		}
	}
	n := 0
	for stream.Receive() {
		n++
	}
	if stream.Err() == nil {
		t.Fatalf("the cut watcher's stream ended cleanly after %d messages, want an error", n)
	}
	t.Logf("the cut watcher read %d messages, then: %v", n, stream.Err())
}
