package event_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/testenv"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
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
