package event

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// TestPublishBufferedWhileEmbeddedReconnects: Publish's contract is that while NATS is
// unreachable a message is buffered and sent when it is back. On the embedded server, the
// bus's in-process connection can drop too (the server closes a client it finds slow, or
// kicks it); while it reconnects, the server has forgotten the bus's own subscriptions. A
// message published meanwhile on a subject the bus itself subscribes to must still arrive
// once the connection (and with it the subscription) is back, on a private server and on one
// that accepts outside clients.
func TestPublishBufferedWhileEmbeddedReconnects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		listen string
	}{{"private", ""}, {"listen", "127.0.0.1:0"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := Open(context.Background(), Config{Listen: tc.listen, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			got := make(chan string, 4)
			if _, err := b.Subscribe("r.>", func(subj string, _ []byte) { got <- subj }); err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			id, err := b.nc.GetClientID()
			if err != nil {
				t.Fatal(err)
			}
			if err := b.embedded.DisconnectClientByID(id); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); b.Connected(); {
				if time.Now().After(deadline) {
					t.Fatal("the bus still connected 5s after the server dropped it")
				}
				time.Sleep(time.Millisecond)
			}
			if err := b.Publish("r.while-down", &lockv1.LockEvent{Key: "k"}); err != nil {
				t.Fatalf("Publish while reconnecting: %v", err)
			}
			select {
			case subj := <-got:
				if subj != "r.while-down" {
					t.Fatalf("got %q, want r.while-down", subj)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the message published while the in-process connection reconnected never arrived (connected now: %v)", b.Connected())
			}
		})
	}
}
