package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/event/subject"
	"github.com/coordkit/coordkit/libs/testenv"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
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
