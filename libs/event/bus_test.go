package event_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
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

// peer is the Config of another coord instance on the embedded server of b: its publisher.
func peer(b *event.Bus) event.Config {
	return event.Config{URL: b.ClientURL(), User: b.Auth().Publisher.User, Password: b.Auth().Publisher.Password}
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
	outside := open(t, peer(server))
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

// TestWanted: on the embedded server a subject is wanted only while a subscription, of this
// process or an outside client, matches it, and Publish of an unwanted one is a quiet
// no-op; an outside NATS's subscribers cannot be seen, so there everything is wanted.
func TestWanted(t *testing.T) {
	t.Parallel()
	b := open(t, event.Config{Listen: "127.0.0.1:0"})
	if b.Wanted("w.1") {
		t.Fatal("Wanted with no subscription at all")
	}
	if err := b.Publish("w.1", &lockv1.LockEvent{Key: "dropped"}); err != nil {
		t.Fatalf("Publish of an unwanted subject: %v", err)
	}
	ch := receive(t, b, "w.*")
	// Every subject is wanted until the Bus has confirmed the server has the subscription
	// (a round trip of its own, in the background); then only the subscribed ones.
	for deadline := time.Now().Add(10 * time.Second); b.Wanted("other.1"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("other.1 still wanted 10s after the subscription to w.* was in force")
		}
	}
	if !b.Wanted("w.1") {
		t.Fatal("w.1 not wanted with a subscription to w.*")
	}
	ev := &lockv1.LockEvent{Key: "k"}
	if err := b.Publish("w.1", ev); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, ev) // the dropped one never arrives first

	outside := open(t, peer(b))
	receive(t, outside, "o.>")
	if !b.Wanted("o.x.y") {
		t.Fatal("a subject an outside client subscribed to is not wanted")
	}
	if !outside.Wanted("nobody.listens") {
		t.Fatal("Wanted is false on an outside NATS, whose subscribers it cannot see")
	}
}

// TestSubscribeOthers: an embedded server with no Listen address has no other connection,
// so SubscribeOthers delivers nothing (and leaves the subject unwanted); with Listen it is
// Subscribe: an outside client's message arrives, and so does the bus's own.
func TestSubscribeOthers(t *testing.T) {
	t.Parallel()
	alone := open(t, event.Config{})
	got := make(chan string, 4)
	if _, err := alone.SubscribeOthers("s.>", func(subj string, _ []byte) { got <- subj }); err != nil {
		t.Fatal(err)
	}
	if err := alone.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if alone.Wanted("s.1") {
		t.Fatal("SubscribeOthers on a private embedded server made s.1 wanted")
	}
	if err := alone.Publish("s.1", &lockv1.LockEvent{}); err != nil {
		t.Fatal(err)
	}
	// A second subscriber of the subject on the same private bus (two services of one
	// process) is an other: from now on both get what either publishes.
	second := make(chan string, 4)
	unsub, err := alone.SubscribeOthers("s.>", func(subj string, _ []byte) { second <- subj })
	if err != nil {
		t.Fatal(err)
	}
	if err := alone.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := alone.Publish("s.2", &lockv1.LockEvent{}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan string{got, second} {
		select {
		case subj := <-ch:
			if subj != "s.2" {
				t.Fatalf("got %q, want s.2", subj)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("with two SubscribeOthers subscribers on a private bus, s.2 did not reach both")
		}
	}
	if err := unsub(); err != nil {
		t.Fatal(err)
	}

	shared := open(t, event.Config{Listen: "127.0.0.1:0"})
	if _, err := shared.SubscribeOthers("s.>", func(subj string, _ []byte) { got <- subj }); err != nil {
		t.Fatal(err)
	}
	if err := shared.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	outside := open(t, peer(shared))
	if err := outside.Publish("s.outside", &lockv1.LockEvent{}); err != nil {
		t.Fatal(err)
	}
	if err := shared.Publish("s.own", &lockv1.LockEvent{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case subj := <-got:
			if subj == "s.1" {
				t.Fatal("the private bus delivered its own message to SubscribeOthers")
			}
			if subj == "s.2" {
				continue // the first subscriber is a real one since the second came
			}
			seen[subj] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("got %v within 10s, want s.outside and s.own", seen)
		}
	}
}
