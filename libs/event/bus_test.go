package event_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

func open(t *testing.T, cfg event.Config) *event.Bus {
	t.Helper()
	b, err := event.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// receive subscribes b to subj and returns the channel its messages arrive on.
func receive(t *testing.T, b *event.Bus, subj string) <-chan *lockv1.LockEvent {
	t.Helper()
	ch := make(chan *lockv1.LockEvent, 16)
	if _, err := b.Subscribe(subj, func(_ string, data []byte) {
		ev := &lockv1.LockEvent{}
		if err := protojson.Unmarshal(data, ev); err != nil {
			t.Errorf("payload %q is not a LockEvent in JSON: %v", data, err)
		}
		ch <- ev
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ch
}

func wantEvent(t *testing.T, ch <-chan *lockv1.LockEvent, want *lockv1.LockEvent) {
	t.Helper()
	select {
	case got := <-ch:
		if !proto.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no event within 10s, want %v", want)
	}
}

// TestEmbedded: with no URL the bus runs its own server; with Listen a subscriber in another
// process (here a second Bus over TCP) gets what the first publishes, as JSON.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	inproc := open(t, event.Config{})
	if inproc.ClientURL() != "" {
		t.Errorf("an embedded server without Listen has ClientURL %q, want none", inproc.ClientURL())
	}
	ch := receive(t, inproc, "t.>")
	ev := &lockv1.LockEvent{Key: "k", Backend: "sqlite", FencingToken: 7}
	if err := inproc.Publish("t.1", ev); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, ev)

	server := open(t, event.Config{Listen: "127.0.0.1:0"})
	if server.ClientURL() == "" {
		t.Fatal("an embedded server with Listen has no ClientURL")
	}
	outside := open(t, event.Config{URL: server.ClientURL()})
	got := receive(t, outside, "t.>")
	if err := server.Publish("t.2", ev); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, got, ev)
}

func TestOpenRefusesListenWithURL(t *testing.T) {
	t.Parallel()
	if b, err := event.Open(context.Background(), event.Config{URL: testenv.NATSURL(), Listen: "127.0.0.1:0"}); err == nil {
		b.Close()
		t.Fatal("Open with both a URL and Listen succeeded")
	}
}

// TestReconnect: a NATS killed and restarted is noticed both ways, and subscriptions carry
// over; a NATS unreachable at start is not an error, and the bus connects when it comes.
func TestReconnect(t *testing.T) {
	t.Parallel()
	nats := testenv.StartNATS(t)
	b := open(t, event.Config{URL: nats.URL()})
	states := make(chan bool, 16)
	b.OnChange(func(up bool) { states <- up })
	ch := receive(t, b, "t.>")
	wantState := func(want bool) {
		t.Helper()
		select {
		case got := <-states:
			if got != want {
				t.Fatalf("OnChange(%v), want %v", got, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no OnChange(%v) within 15s", want)
		}
		if b.Connected() != want {
			t.Fatalf("Connected() = %v after OnChange(%v)", b.Connected(), want)
		}
	}
	nats.Stop()
	wantState(false)
	nats.Start()
	wantState(true)
	ev := &lockv1.LockEvent{Key: "after restart"}
	if err := b.Publish("t.x", ev); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, ev)

	late := testenv.StartNATS(t)
	late.Stop()
	lb := open(t, event.Config{URL: late.URL()})
	if lb.Connected() {
		t.Fatal("connected to a stopped server")
	}
	up := make(chan bool, 4)
	lb.OnChange(func(c bool) { up <- c })
	late.Start()
	select {
	case c := <-up:
		if !c {
			t.Fatal("OnChange(false) while the server came up")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the bus did not connect within 15s of its server starting")
	}
}
