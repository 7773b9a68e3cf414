package event

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWantedRightAfterEmbeddedReconnect: Wanted is true while the connection to the
// embedded server is down because the server has forgotten the bus's own subscriptions
// until the client resends them. But nats.go reports the connection CONNECTED (IsConnected)
// as soon as the server answered the CONNECT's PING, and only then resends the SUBs; once it
// releases its lock the last SUB may still be unparsed by the server. In that window Wanted
// reads the server's subscriptions, finds none for a subject the bus subscribes to, and
// Publish drops a message that nc.Publish would have delivered (its SUB precedes it on the
// wire). Checkers spin on Wanted across reconnects; any false is a dropped publish.
func TestWantedRightAfterEmbeddedReconnect(t *testing.T) {
	b, err := Open(context.Background(), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.Subscribe("w.>", func(string, []byte) {}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var dropped, connectedChecks atomic.Int64
	// phase is odd from the moment the bus saw its connection drop until the next drop is
	// about to be made: a message published after the server dropped the client but before
	// the client noticed is lost on the wire whatever Wanted says, so only a Wanted that
	// began and ended within one odd phase counts (a checker descheduled across the phase
	// change would otherwise blame Wanted for that window).
	var phase atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load()
				if p%2 == 0 {
					continue
				}
				if !b.Wanted("w.x") && phase.Load() == p {
					dropped.Add(1)
				}
				connectedChecks.Add(1)
			}
		}()
	}
	const rounds = 40
	for round := range rounds {
		id, err := b.nc.GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		phase.Store(2 * int64(round)) // even: the drop is about to be made
		if err := b.embedded.DisconnectClientByID(id); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); b.Connected(); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatal("still connected 5s after the server dropped the bus")
			}
		}
		phase.Store(2*int64(round) + 1) // odd: the bus knows it is disconnected
		for deadline := time.Now().Add(10 * time.Second); !(b.Connected() && b.account.SubscriptionInterest("w.x")); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatal("subscription not back within 10s")
			}
		}
	}
	close(stop)
	wg.Wait()
	if n := dropped.Load(); n > 0 {
		t.Fatalf("in %d reconnects Wanted said false %d times (of %d checks) for a subject the bus subscribes to: Publish dropped what it promises to deliver", rounds, n, connectedChecks.Load())
	}
}
