package event_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protojson"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestSignedEvents attacks a keyed Bus on an outside NATS anyone may publish on: unsigned
// messages, messages signed with another key, and a genuine signature copied onto another
// payload or subject are all dropped before any subscriber sees them, and counted; what a
// Bus with the key publishes arrives.
func TestSignedEvents(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	reg := prometheus.NewRegistry()
	recv := open(t, event.Config{URL: testenv.NATSURL(), Key: key, Registerer: reg})
	send := open(t, event.Config{URL: testenv.NATSURL(), Key: key})
	other := open(t, event.Config{URL: testenv.NATSURL(), Key: []byte("another key of 16+ bytes")})
	base := "coordkit.signtest." + strconv.FormatInt(time.Now().UnixNano(), 36)
	got := receive(t, recv, base+".>")

	raw, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// A genuine signed message, seen by a raw subscriber, to copy its signature from.
	copied := make(chan *nats.Msg, 1)
	if _, err := raw.ChanSubscribe(base+".genuine", copied); err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	genuine := &lockv1.LockEvent{Key: "genuine", FencingToken: 5}
	if err := send.Publish(base+".genuine", genuine); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, got, genuine)
	var m *nats.Msg
	select {
	case m = <-copied:
	case <-time.After(10 * time.Second):
		t.Fatal("the raw subscriber saw no genuine message")
	}
	if m.Header.Get(event.SignatureHeader) == "" {
		t.Fatalf("a keyed Bus published without %s", event.SignatureHeader)
	}

	for _, forged := range []*nats.Msg{
		{Subject: base + ".unsigned", Data: []byte(`{"key":"unsigned"}`)},
		{Subject: base + ".tampered", Data: []byte(`{"key":"genuine","fencingToken":"6"}`), Header: m.Header},
		{Subject: base + ".moved", Data: m.Data, Header: m.Header},
		{Subject: base + ".garbage", Data: []byte(`{}`), Header: nats.Header{event.SignatureHeader: {"v1=AAAA"}}},
	} {
		if err := raw.PublishMsg(forged); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Publish(base+".otherkey", &lockv1.LockEvent{Key: "otherkey"}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	last := &lockv1.LockEvent{Key: "last", FencingToken: 7}
	if err := send.Publish(base+".last", last); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, got, last) // nothing forged came in between
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := testutil.GatherAndCount(reg, "coordkit_events_rejected_total")
		if err != nil {
			t.Fatal(err)
		}
		total := rejectedTotal(t, reg)
		if n == 2 && total == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("coordkit_events_rejected_total: %d series summing to %v, want unsigned and bad_signature summing to 5", n, total)
		}
	}
}

// rejectedTotal sums coordkit_events_rejected_total over its reasons.
func rejectedTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "coordkit_events_rejected_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// capture subscribes a raw client to subj and returns the first message it sees there.
func capture(t *testing.T, raw *nats.Conn, subj string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 1)
	sub, err := raw.ChanSubscribe(subj, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AutoUnsubscribe(1); err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// waitRejected waits until coordkit_events_rejected_total{reason} reaches want.
func waitRejected(t *testing.T, reg *prometheus.Registry, reason string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := rejectedFor(t, reg, reason)
		if got >= want {
			if got > want {
				t.Fatalf("coordkit_events_rejected_total{reason=%q} = %v, want %v", reason, got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("coordkit_events_rejected_total{reason=%q} = %v within 20s, want %v", reason, got, want)
		}
	}
}

// rejectedFor is coordkit_events_rejected_total{reason}.
func rejectedFor(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "coordkit_events_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestReplayedSignedEventsDeliveredOnce: a raw client on a NATS anyone may publish on
// captures a genuine signed event and publishes it verbatim, headers and all, 3,000 times;
// the subscriber saw it once, drops every copy as replayed, and still gets what comes next.
func TestReplayedSignedEventsDeliveredOnce(t *testing.T) {
	t.Parallel()
	key := []byte("replay-test-cluster-key-0123456789")
	reg := prometheus.NewRegistry()
	recv := open(t, event.Config{URL: testenv.NATSURL(), Key: key, Registerer: reg})
	send := open(t, event.Config{URL: testenv.NATSURL(), Key: key})
	base := "coordkit.replaytest." + strconv.FormatInt(time.Now().UnixNano(), 36)
	got := receive(t, recv, base+".>")
	raw, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	copied := capture(t, raw, base+".acquired")
	genuine := &lockv1.LockEvent{Key: "k", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_ACQUIRED, FencingToken: 1}
	noErr(t, send.Publish(base+".acquired", genuine))
	wantEvent(t, got, genuine)
	m := <-copied
	const copies = 3000
	for range copies {
		noErr(t, raw.PublishMsg(&nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}))
	}
	noErr(t, raw.Flush())
	waitRejected(t, reg, "replayed", copies)
	last := &lockv1.LockEvent{Key: "k", Kind: lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, FencingToken: 1}
	noErr(t, send.Publish(base+".released", last))
	wantEvent(t, got, last) // no copy came in between
	if n := len(got); n != 0 {
		t.Fatalf("%d more events after the release, want none", n)
	}
}

// TestTwoPublishersUnderReplay: two keyed publishers send 1,500 events each from four
// goroutines apiece while a raw client replays every message it sees twice; the subscriber
// gets each genuine event exactly once and rejects every copy.
func TestTwoPublishersUnderReplay(t *testing.T) {
	t.Parallel()
	key := []byte("two-publishers-cluster-key-012345")
	reg := prometheus.NewRegistry()
	recv := open(t, event.Config{URL: testenv.NATSURL(), Key: key, Registerer: reg})
	pubs := []*event.Bus{open(t, event.Config{URL: testenv.NATSURL(), Key: key}), open(t, event.Config{URL: testenv.NATSURL(), Key: key})}
	base := "coordkit.twopub." + strconv.FormatInt(time.Now().UnixNano(), 36)
	var mu sync.Mutex
	seen := map[string]int{}
	if _, err := recv.Subscribe(base+".>", func(_ string, data []byte) {
		var ev lockv1.LockEvent
		if err := protojson.Unmarshal(data, &ev); err != nil {
			t.Error(err)
		}
		mu.Lock()
		seen[fmt.Sprintf("%s/%d", ev.GetKey(), ev.GetFencingToken())]++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	noErr(t, recv.Flush(context.Background()))
	raw, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var replayed atomic.Int64
	if _, err := raw.Subscribe(base+".>", func(m *nats.Msg) {
		if m.Header.Get("Replayed") != "" {
			return
		}
		h := nats.Header{"Replayed": {"1"}}
		for k, v := range m.Header {
			h[k] = v
		}
		for range 2 {
			if raw.PublishMsg(&nats.Msg{Subject: m.Subject, Data: m.Data, Header: h}) == nil {
				replayed.Add(1)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	noErr(t, raw.Flush())
	const perGoroutine, goroutines = 375, 4
	var wg sync.WaitGroup
	for p, pub := range pubs {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perGoroutine {
					ev := &lockv1.LockEvent{Key: fmt.Sprintf("p%d", p), FencingToken: uint64(g*perGoroutine + i + 1)}
					if err := pub.Publish(fmt.Sprintf("%s.p%d.g%d", base, p, g), ev); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	const want = 2 * goroutines * perGoroutine
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == want && replayed.Load() == 2*want && rejectedTotal(t, reg) == 2*want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d genuine events arrived; %d copies replayed, %v rejected", n, want, replayed.Load(), rejectedTotal(t, reg))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %s delivered %d times, want once", id, n)
		}
	}
	if got := rejectedFor(t, reg, "replayed"); got != 2*want {
		t.Fatalf("%v copies rejected as replayed, want %d", got, 2*want)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
