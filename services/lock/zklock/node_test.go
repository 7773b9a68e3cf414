package zklock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

func TestParentName(t *testing.T) {
	t.Parallel()
	keys := []string{
		"order.42", ".", "..", "a/b/c", "锁:订单:42", "emoji 🔒", "tab\tand\nnewline", "\u00a0\ufeff",
		strings.Repeat("k", 512), strings.Repeat("锁", 170),
	}
	seen := map[string]string{}
	for _, key := range keys {
		name := parentName(key)
		if strings.ContainsAny(name, "/.") || name == "" {
			t.Errorf("key %q: node name %q is not a single safe node name", key, name)
		}
		if got := keyOf("/root/" + name); got != key {
			t.Errorf("key %q: decodes back to %q", key, got)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("keys %q and %q share node name %q", key, other, name)
		}
		seen[name] = key
	}
}

func TestQueueOrder(t *testing.T) {
	t.Parallel()
	names := []string{
		"lock-bbbb-0000000010", "lock-aaaa-0000000002", "stray", "lock-cccc-0000000009",
		"lock-dddd-notanumber", ".clock",
	}
	got := queueOrder(names)
	want := []string{"lock-aaaa-0000000002", "lock-cccc-0000000009", "lock-bbbb-0000000010"}
	if len(got) != len(want) {
		t.Fatalf("queueOrder = %v, want %v (strays ignored)", got, want)
	}
	for i := range want {
		if got[i].name != want[i] {
			t.Fatalf("queueOrder[%d] = %s, want %s (by sequence, not by name)", i, got[i].name, want[i])
		}
	}
	if p := position(got, "lock-bbbb-0000000010"); p != 2 {
		t.Fatalf("position = %d, want 2", p)
	}
}

func TestNodeDataRoundTrip(t *testing.T) {
	t.Parallel()
	in := nodeData{Owner: "o", Holds: 3, TTLms: 1500, LeaseMs: 3000, Token: 42, Origin: "lock-ab-0000000001"}
	out, err := decodeNode("/x", in.encode())
	in.V = dataVersion
	if err != nil || out != in {
		t.Fatalf("round trip = (%+v, %v), want %+v", out, err, in)
	}
	// Format 1 nodes, written before the lease ttl and the carried token existed, still read:
	// the token is then the node's creation zxid and the ttl is the lease's own.
	old, err := decodeNode("/x", []byte(`{"v":1,"owner":"o","holds":2,"ttl_ms":900}`))
	if err != nil {
		t.Fatalf("decode a format 1 node: %v, want it read", err)
	}
	e := &entry{path: "/p/lock-aa-0000000007", data: old, stat: &zk.Stat{Czxid: 77}}
	if e.token() != 77 || e.leaseTTL() != 900*time.Millisecond || e.origin() != "lock-aa-0000000007" {
		t.Fatalf("format 1 node: token %d, lease ttl %v, origin %q; want the czxid 77, 900ms and its own name",
			e.token(), e.leaseTTL(), e.origin())
	}
	for _, raw := range []string{"", "{", `{"v":0,"owner":"o"}`, `{"v":3,"owner":"o"}`} {
		if _, err := decodeNode("/x", []byte(raw)); !errors.Is(err, errBadData) {
			t.Errorf("decode %q: %v, want errBadData", raw, err)
		}
	}
}

// TestServerClock: the estimate is a lower bound of the leader's clock whatever the round
// trip, so a lease is never judged expired early.
func TestServerClock(t *testing.T) {
	t.Parallel()
	var c serverClock
	sent := time.Now()
	received := sent.Add(40 * time.Millisecond)
	// The leader stamped 20ms into the round trip, at its Unix ms 1_000_000.
	c.observe(sent, received, 1_000_000)
	// At `received` the leader is at 1_000_020; the estimate must not exceed that.
	if got := c.serverNow(received); got > 1_000_020 || got < 1_000_000 {
		t.Fatalf("serverNow at reply = %d, want within [1000000, 1000020]", got)
	}
	e := &entry{data: nodeData{TTLms: 100}, stat: &zk.Stat{Mtime: 1_000_000}}
	if c.expired(received.Add(90*time.Millisecond), e) {
		t.Fatal("expired 90ms after the reply of a write stamped with a 100ms ttl, want live")
	}
	if !c.expired(received.Add(101*time.Millisecond), e) {
		t.Fatal("live 101ms after the reply, want expired")
	}
	// A much noisier sample does not replace a fresh, tight one...
	c.observe(received, received.Add(time.Second), 1_000_500)
	if got := c.serverNow(received); got != 1_000_000 {
		t.Fatalf("noisy sample replaced a fresh tight one: serverNow = %d", got)
	}
	// ...but a comparable one does, so a stepped leader clock is followed.
	later := received.Add(2 * time.Second)
	c.observe(later.Add(-30*time.Millisecond), later, 900_000)
	if got := c.serverNow(later); got != 900_000 {
		t.Fatalf("serverNow after the leader stepped back = %d, want 900000", got)
	}
}
