package event

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/coordkit/coordkit/libs/testenv"
)

// openKeyed is a keyed Bus on the shared NATS and the channel of the payloads its
// subscription to subj delivers.
func openKeyed(t *testing.T, key []byte, subj string) (*Bus, <-chan string) {
	t.Helper()
	b, err := Open(context.Background(), Config{URL: testenv.NATSURL(), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ch := make(chan string, 64)
	if _, err := b.Subscribe(subj, func(_ string, data []byte) { ch <- string(data) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b, ch
}

func rawConn(t *testing.T) *nats.Conn {
	t.Helper()
	raw, err := nats.Connect(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return raw
}

// next is the next payload on ch, within 10s.
func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered within 10s")
		return ""
	}
}

// TestStaleSignedEventsDropped: messages correctly signed with the key but sent (by their
// signed time) more than the window before or after the receiver's clock are dropped as
// stale, and so is a message with a genuine old-format (v1) signature; a fresh one arrives.
func TestStaleSignedEventsDropped(t *testing.T) {
	t.Parallel()
	key := []byte("stale-test-cluster-key-0123456789")
	subj := "coordkit.staletest." + strconv.FormatInt(time.Now().UnixNano(), 36)
	b, got := openKeyed(t, key, subj)
	raw := rawConn(t)
	sender, err := newSenderID()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	publish := func(sig, data string) {
		t.Helper()
		if err := raw.PublishMsg(&nats.Msg{Subject: subj, Data: []byte(data), Header: nats.Header{SignatureHeader: {sig}}}); err != nil {
			t.Fatal(err)
		}
	}
	old := now.Add(-DefaultSignatureWindow - 5*time.Second).UnixMilli()
	ahead := now.Add(DefaultSignatureWindow + 5*time.Second).UnixMilli()
	publish(sign(key, sender, 1, old, subj, []byte(`"old"`)), `"old"`)
	publish(sign(key, sender, 2, ahead, subj, []byte(`"ahead"`)), `"ahead"`)
	v1 := hmac.New(sha256.New, key)
	v1.Write([]byte(subj + "\x00" + `"v1"`))
	publish("v1="+base64.RawURLEncoding.EncodeToString(v1.Sum(nil)), `"v1"`)
	publish(sign(key, sender, 3, time.Now().UnixMilli(), subj, []byte(`"fresh"`)), `"fresh"`)
	if d := next(t, got); d != `"fresh"` {
		t.Fatalf("delivered %s first, want only the fresh message", d)
	}
	if s, bad := b.metrics.rejected.WithLabelValues("stale"), b.metrics.rejected.WithLabelValues("bad_signature"); counterValue(t, s) != 2 || counterValue(t, bad) != 1 {
		t.Fatalf("rejected stale %v, bad_signature %v; want 2 and 1", counterValue(t, s), counterValue(t, bad))
	}
}

// TestReplayCacheBoundedUnderFlood: 20,000 forged messages, each claiming a new sender (a
// well-formed v2 header with a wrong MAC) or carrying none, and 20,000 verbatim copies of
// genuine ones leave the subscriber remembering one sender, the genuine one; genuine
// messages sent during the flood all arrive, each once.
func TestReplayCacheBoundedUnderFlood(t *testing.T) {
	t.Parallel()
	key := []byte("flood-test-cluster-key-0123456789")
	subj := "coordkit.floodtest." + strconv.FormatInt(time.Now().UnixNano(), 36)
	b, got := openKeyed(t, key, subj)
	send, err := Open(context.Background(), Config{URL: testenv.NATSURL(), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { send.Close() })
	raw := rawConn(t)
	var genuine sync.Map // payload -> the first verified message with it the raw client saw
	if _, err := raw.Subscribe(subj, func(m *nats.Msg) {
		if _, why := verified(key, m); why == "" {
			genuine.LoadOrStore(string(m.Data), m)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	const rounds, perRound = 20, 1000
	var copies atomic.Int64
	for r := range rounds {
		data := []byte(strconv.Itoa(r))
		if err := send.PublishJSON(subj, data); err != nil {
			t.Fatal(err)
		}
		if d := next(t, got); d != string(data) {
			t.Fatalf("delivered %s, want %s", d, data)
		}
		var m *nats.Msg
		for deadline := time.Now().Add(10 * time.Second); m == nil; time.Sleep(time.Millisecond) {
			if v, ok := genuine.Load(string(data)); ok {
				m = v.(*nats.Msg)
			} else if time.Now().After(deadline) {
				t.Fatal("the raw subscriber saw no genuine message")
			}
		}
		for i := range perRound {
			forged := &nats.Msg{Subject: subj, Data: data}
			switch i % 4 {
			case 0: // a new sender each time, a MAC that does not verify
				sender, _ := newSenderID()
				forged.Header = nats.Header{SignatureHeader: {sigPrefix + sender + ".1." + strconv.FormatInt(time.Now().UnixMilli(), 10) + ".AAAA"}}
			case 1: // unsigned
			default: // the genuine message again
				forged.Header = m.Header
				copies.Add(1)
			}
			if err := raw.PublishMsg(forged); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := send.PublishJSON(subj, []byte(`"last"`)); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got); d != `"last"` {
		t.Fatalf("delivered %s, want the last genuine message and no copy", d)
	}
	if n := b.senders.Load(); n != 1 {
		t.Fatalf("the subscription remembers %d senders, want 1", n)
	}
	if n := counterValue(t, b.metrics.rejected.WithLabelValues("replayed")); n != float64(copies.Load()) {
		t.Fatalf("%v copies rejected as replayed, want %d", n, copies.Load())
	}
}

// TestReplayCacheLimit: a cache full of fresh senders refuses a new one rather than forget
// one whose messages could then be replayed; once their messages are older than the window
// they are forgotten and a new sender gets in. A sender's old messages stay refused all the
// while.
func TestReplayCacheLimit(t *testing.T) {
	t.Parallel()
	var tracked atomic.Int64
	c := newReplayCache(time.Minute, &tracked)
	now := time.Now()
	ms := now.UnixMilli()
	for i := range maxSenders {
		if why := c.admit(now, signed{sender: strconv.Itoa(i), seq: 1, ms: ms}); why != "" {
			t.Fatalf("sender %d: %s", i, why)
		}
	}
	if why := c.admit(now, signed{sender: "new", seq: 1, ms: ms}); why != "sender_limit" {
		t.Fatalf("a new sender on a full cache: %q, want sender_limit", why)
	}
	if why := c.admit(now, signed{sender: "0", seq: 1, ms: ms}); why != "replayed" {
		t.Fatalf("a replay on a full cache: %q, want replayed", why)
	}
	if why := c.admit(now, signed{sender: "0", seq: 2, ms: ms}); why != "" {
		t.Fatalf("a known sender's next message on a full cache: %q", why)
	}
	later := now.Add(61 * time.Second)
	if why := c.admit(later, signed{sender: "1", seq: 1, ms: ms}); why != "stale" {
		t.Fatalf("a replay after the window: %q, want stale", why)
	}
	if why := c.admit(later, signed{sender: "new", seq: 1, ms: later.UnixMilli()}); why != "" {
		t.Fatalf("a new sender once the others are old: %q", why)
	}
	if n := tracked.Load(); n != 1 || len(c.senders) != 1 {
		t.Fatalf("%d senders remembered (%d counted), want 1", len(c.senders), n)
	}
	// Within one sender: reordering inside the window is fine, a number seen or too far
	// behind is not.
	for _, step := range []struct {
		seq  uint64
		want string
	}{{10, ""}, {5, ""}, {5, "replayed"}, {2000, ""}, {10, "replayed"}, {1500, ""}, {1500, "replayed"}, {2000, "replayed"}} {
		if why := c.admit(later, signed{sender: "w", seq: step.seq, ms: later.UnixMilli()}); why != step.want {
			t.Fatalf("seq %d: %q, want %q", step.seq, why, step.want)
		}
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}
