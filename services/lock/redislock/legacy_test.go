package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// TestLeaseOfOlderVersion meets a lease as versions before holder ids wrote it: a hash
// without a holder field whose owner is the plain secret, and a lease key
// "<fence>:<owner>". It stays held, by a holder without id, until it expires; its expiry is
// reported without a holder id (never with the old secret); the next holder gets an id.
func TestLeaseOfOlderVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t)
	testenv.CleanRedis(t, rdb, prefix)
	b := New(rdb, Config{Prefix: prefix})
	reports := make(chan lock.Expiry, 4)
	b.ReportExpiries(func(e lock.Expiry) { reports <- e })

	const key, secret = "legacy", "plain-old-owner-secret"
	keys := b.keys(key)
	if err := rdb.HSet(ctx, keys[0], "owner", secret, "count", 1, "fence", 7, "ttl", 300).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, keys[0], time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, keys[2], "7:"+secret, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	st, err := b.Inspect(ctx, key)
	if err != nil || !st.Held || st.FencingToken != 7 || st.HolderID != "" {
		t.Fatalf("Inspect of an old lease = %+v, %v; want held, token 7, no holder id", st, err)
	}
	att, err := b.TryAcquire(ctx, key, "digest-of-another-owner", time.Minute)
	if err != nil || att.Acquired || att.Holder.HolderID != "" {
		t.Fatalf("TryAcquire on an old lease = %+v, %v; want busy, holder without id", att, err)
	}
	// The old lease runs out (its hash expires, as PEXPIRE would end it), leaving its lease key.
	if err := rdb.Del(ctx, keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	att, err = b.TryAcquire(ctx, key, "digest-of-another-owner", time.Minute)
	if err != nil || !att.Acquired || len(att.Lease.HolderID) != 16 {
		t.Fatalf("TryAcquire after the old lease expired = %+v, %v; want acquired with a holder id", att, err)
	}
	select {
	case e := <-reports:
		if e.FencingToken != 7 || e.HolderID != "" {
			t.Fatalf("expiry of the old lease reported as %+v; want token 7 and no holder id", e)
		}
	case <-time.After(time.Second):
		t.Fatal("the old lease's expiry was not reported")
	}
}
