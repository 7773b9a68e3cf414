package lock_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// syncBuffer is a bytes.Buffer safe for a logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchFanOutScale: 5,000 prefix watchers (1,000, with 200 pairs, under the race
// detector, which allows 8,128 goroutines and is slow) on one instance, each through its own Watch stream over h2c, cost the
// instance's NATS connection one delivery per event, not one per watcher: while they watch,
// 500 acquire/release pairs stay within a wide margin of their time without watchers, the
// instance's own NATS connection never drops or reports a slow consumer, and every watcher
// whose prefix matches gets every event. (With a subscription per watcher the server wrote
// each event once per watcher to the instance's one connection: 2,000 watchers dropped it
// three times and made the pairs 50 times slower.)
func TestWatchFanOutScale(t *testing.T) {
	watchers, readers, pairs, workers := 5000, 10, 500, 10
	if testenv.Race {
		watchers, pairs = 1000, 200
	}
	logs := &syncBuffer{}
	bus := openBus(t, event.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	var drops atomic.Int64
	bus.OnChange(func(up bool) {
		if !up {
			drops.Add(1)
		}
	})
	srv := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxStreams: -1})
	svc, err := lock.NewService(lock.Config{
		Backends: map[string]lock.Backend{"sqlite": sqliteStore(t)(t)}, Events: bus, Recheck: -1, Registerer: srv.Registry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	srv.Handle(lockv1connect.NewLockServiceHandler(svc, srv.HandlerOptions()...))
	url, stop := testenv.Serve(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(url)

	runPairs := func(round string) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				key := fmt.Sprintf("pair/%s/%d", round, w)
				for range pairs / workers {
					l, err := acquireWithin(ctx, c, key, 30*time.Second)
					if err == nil {
						_, err = c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: l.GetOwner(), FencingToken: l.GetFencingToken()})
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s pairs: %v", round, err)
		}
		return time.Since(start)
	}
	runPairs("warm")
	alone := runPairs("alone")

	// The watchers: a few on the pairs' prefix, reading; the rest on prefixes nothing
	// matches, as most of a busy instance's watchers are for most events.
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	lc := lockv1connect.NewLockServiceClient(&http.Client{Transport: &http.Transport{Protocols: p}}, url)
	wctx, wcancel := context.WithCancel(ctx)
	streams := make([]*connect.ServerStreamForClient[lockv1.WatchResponse], watchers)
	opened := time.Now()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < watchers; i = int(next.Add(1)) - 1 {
				prefix := fmt.Sprintf("idle-%d/", i)
				if i < readers {
					prefix = "pair/with/"
				}
				s, err := lc.Watch(wctx, &lockv1.WatchRequest{Prefix: prefix})
				if err == nil {
					_, err = s.ResponseHeader(), s.Err() // the headers: the watch is in force
				}
				if err != nil {
					t.Errorf("watch %d: %v", i, err)
					return
				}
				streams[i] = s
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		wcancel()
		t.FailNow()
	}
	t.Logf("%d watch streams open in %v", watchers, time.Since(opened).Round(time.Millisecond))
	got := make([]atomic.Int64, readers)
	ended := make([]chan error, readers)
	for i := range readers {
		ended[i] = make(chan error, 1)
		go func() {
			for streams[i].Receive() {
				if streams[i].Msg().GetEvent() != nil {
					got[i].Add(1)
				}
			}
			ended[i] <- streams[i].Err()
		}()
	}

	with := runPairs("with")
	t.Logf("%d acquire/release pairs: %v without watchers, %v with %d watching", pairs, alone.Round(time.Millisecond), with.Round(time.Millisecond), watchers)
	if limit := 10*alone + 3*time.Second; with > limit {
		t.Errorf("pairs took %v with %d watchers, over %v (10 times their %v without, plus 3s)", with, watchers, limit, alone)
	}
	// Every reading watcher gets every event, or is told it fell behind: never fewer
	// events in silence.
	want := int64(2 * pairs / workers * workers)
	told := 0
	for i := range readers {
		for start := time.Now(); got[i].Load() < want; time.Sleep(10 * time.Millisecond) {
			select {
			case err := <-ended[i]:
				if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "events behind") {
					t.Fatalf("reading watcher %d ended after %d of %d events with %v, want resource_exhausted naming the lag", i, got[i].Load(), want, err)
				}
				told++
				t.Logf("reading watcher %d got %d of %d events, then was told: %v", i, got[i].Load(), want, err)
				start = time.Time{}
			default:
			}
			if start.IsZero() {
				break
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("reading watcher %d got %d of %d events and was not told it fell behind", i, got[i].Load(), want)
			}
		}
	}
	if told == readers {
		t.Errorf("all %d reading watchers fell behind", readers)
	}
	if n := drops.Load(); n > 0 {
		t.Errorf("the instance's NATS connection dropped %d times:\n%.3000s", n, logs)
	}
	if out := logs.String(); strings.Contains(strings.ToLower(out), "slow consumer") {
		t.Errorf("the instance's NATS connection reported a slow consumer:\n%.3000s", out)
	}
	wcancel()
	for _, s := range streams {
		s.Close()
	}
	if err := stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
}
