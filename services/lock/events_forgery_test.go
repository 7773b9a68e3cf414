package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/subject"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// TestForgedEventsNeverReachWatch: with an events key, a flood of well-formed but unsigned
// events about a watched key (1,000, four times what a watcher may leave unread) reaches
// neither the Watch stream, which stays open, nor the waiters; every one is counted as
// rejected, and the key's genuine events still arrive.
func TestForgedEventsNeverReachWatch(t *testing.T) {
	t.Parallel()
	bc := backendCase{name: "sqlite", store: sqliteStore}
	reg := prometheus.NewRegistry()
	bus := openBus(t, event.Config{URL: testenv.NATSURL(), Key: []byte("forged-watch-test-cluster-key-01"), Registerer: reg})
	a := serveLock(t, lock.Config{Backends: map[string]lock.Backend{bc.name: bc.store(t)(t)}, Events: bus, Recheck: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := fmt.Sprintf("forged-watch-%d", time.Now().UnixNano())
	stream, err := a.client.Locks().Watch(ctx, &lockv1.WatchRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *lockv1.WatchResponse, 2048)
	ended := make(chan error, 1)
	go func() {
		for stream.Receive() {
			msgs <- stream.Msg()
		}
		ended <- stream.Err()
	}()
	select {
	case m := <-msgs:
		if m.GetState() == nil {
			t.Fatalf("first watch message %v, want the state", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no state within 10s")
	}
	raw, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	const forged = 1000
	for i := range forged {
		ev := &lockv1.LockEvent{Key: key, Backend: bc.name, Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, FencingToken: uint64(i + 1)}
		data, _ := protojson.Marshal(ev)
		noErr(t, raw.Publish(subject.Lock(subject.Released, bc.name, key), data))
	}
	noErr(t, raw.Flush())
	for deadline := time.Now().Add(20 * time.Second); registryTotal(t, reg, "coordkit_events_rejected_total") < forged; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d forged events rejected within 20s", registryTotal(t, reg, "coordkit_events_rejected_total"), forged)
		}
	}
	held := must(acquireWithin(ctx, a.client, key, 30*time.Second))(t)
	select {
	case m := <-msgs:
		if ev := m.GetEvent(); ev.GetKind() != lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED || ev.GetFencingToken() != held.GetFencingToken() {
			t.Fatalf("after the flood the watcher got %v, want only the genuine acquire (token %d)", m, held.GetFencingToken())
		}
	case err := <-ended:
		t.Fatalf("the forged flood ended the watch: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no genuine event within 10s of the acquire")
	}
	if n := len(msgs); n != 0 {
		t.Fatalf("%d more messages after the acquire, want none", n)
	}
}

// TestReplayedEventsNeverReachWatch: with an events key on a NATS anyone may publish on, a
// raw client captures the genuine signed `acquired` of a watched key and publishes it
// verbatim 5,000 times (five times what a watcher may leave unread) after the release. The
// watcher saw the acquire once and the release once; every copy is rejected as replayed,
// the stream stays open, and the key's next genuine event is the next thing it sees.
func TestReplayedEventsNeverReachWatch(t *testing.T) {
	t.Parallel()
	bc := backendCase{name: "sqlite", store: sqliteStore}
	reg := prometheus.NewRegistry()
	bus := openBus(t, event.Config{URL: testenv.NATSURL(), Key: []byte("replay-watch-test-cluster-key-01"), Registerer: reg})
	a := serveLock(t, lock.Config{Backends: map[string]lock.Backend{bc.name: bc.store(t)(t)}, Events: bus, Recheck: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := fmt.Sprintf("replay-watch-%d", time.Now().UnixNano())
	raw, err := nats.Connect(testenv.NATSURL())
	noErr(t, err)
	defer raw.Close()
	captured := make(chan *nats.Msg, 1)
	sub, err := raw.ChanSubscribe(subject.Lock(subject.Acquired, bc.name, key), captured)
	noErr(t, err)
	noErr(t, sub.AutoUnsubscribe(1))
	noErr(t, raw.Flush())

	stream, err := a.client.Locks().Watch(ctx, &lockv1.WatchRequest{Key: key})
	noErr(t, err)
	msgs := make(chan *lockv1.WatchResponse, 8192)
	ended := make(chan error, 1)
	go func() {
		for stream.Receive() {
			msgs <- stream.Msg()
		}
		ended <- stream.Err()
	}()
	next := func(what string) *lockv1.LockEvent {
		t.Helper()
		select {
		case m := <-msgs:
			return m.GetEvent()
		case err := <-ended:
			t.Fatalf("the watch ended waiting for %s: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10s", what)
		}
		return nil
	}
	if m := <-msgs; m.GetState() == nil {
		t.Fatalf("first watch message %v, want the state", m)
	}
	held := must(acquireWithin(ctx, a.client, key, 30*time.Second))(t)
	if ev := next("acquire"); ev.GetKind() != lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED || ev.GetFencingToken() != held.GetFencingToken() {
		t.Fatalf("watcher got %v, want the acquire", ev)
	}
	must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
	if ev := next("release"); ev.GetKind() != lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED {
		t.Fatalf("watcher got %v, want the release", ev)
	}
	var m *nats.Msg
	select {
	case m = <-captured:
	case <-time.After(10 * time.Second):
		t.Fatal("the raw client captured no acquire")
	}
	const copies = 5000
	for range copies {
		noErr(t, raw.PublishMsg(&nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}))
	}
	noErr(t, raw.Flush())
	for deadline := time.Now().Add(20 * time.Second); registryTotal(t, reg, "coordkit_events_rejected_total") < copies; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d copies rejected within 20s; the watcher has %d messages queued", registryTotal(t, reg, "coordkit_events_rejected_total"), copies, len(msgs))
		}
	}
	again := must(acquireWithin(ctx, a.client, key, 30*time.Second))(t)
	if ev := next("second acquire"); ev.GetKind() != lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED || ev.GetFencingToken() != again.GetFencingToken() {
		t.Fatalf("after the replays the watcher got %v, want only the genuine second acquire (token %d)", ev, again.GetFencingToken())
	}
	if n := len(msgs); n != 0 {
		t.Fatalf("%d more messages after the second acquire, want none", n)
	}
}
