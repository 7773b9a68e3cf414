package lock_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
)

// TestTTLFractionOfAMillisecond: a ttl with a fraction of a millisecond (10s + 0.999ms) must
// not be reported as the lease's length when Redis, which counts whole milliseconds, holds it
// for 10000 ms: the lease would end up to a millisecond before its reported expires_at. (The
// seconds only keep the key alive until PEXPIRETIME reads it on a loaded machine; the
// fraction is what the test attacks.) Redis
// drops a key once its clock is past the millisecond PEXPIRETIME names, so a lease ends no
// sooner than that millisecond's end; every reported expiry, single or batched, must be
// before it.
func TestTTLFractionOfAMillisecond(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t)
	inst := serveLock(t, lock.Config{
		Backends: map[string]lock.Backend{"redis": redislock.New(redisconf.Pipelined(rdb), redislock.Config{Prefix: prefix})},
		Logger:   slog.New(slog.DiscardHandler),
	})
	raw := client.New(inst.url, client.WithBatching(0)).Locks()
	layout := redislock.NewLayout(prefix)
	ctx := context.Background()
	ttl := durationpb.New(10*time.Second + 999*time.Microsecond)
	for i := range 20 {
		single := fmt.Sprintf("single-%d", i)
		a := must(raw.Acquire(ctx, &lockv1.AcquireRequest{Key: single, Ttl: ttl}))(t)
		batched := fmt.Sprintf("batched-%d", i)
		b := must(raw.Batch(ctx, &lockv1.BatchRequest{Operations: []*lockv1.BatchOperation{acquireOp(&lockv1.AcquireRequest{Key: batched, Ttl: ttl})}}))(t)
		for key, lease := range map[string]*lockv1.Lease{single: a.GetLease(), batched: b.GetResults()[0].GetAcquire().GetLease()} {
			when, err := rdb.PExpireTime(ctx, layout.Keys(key)[0]).Result()
			if err != nil || when <= 0 {
				t.Fatalf("PEXPIRETIME of %s: %v, %v", key, when, err)
			}
			ends := time.UnixMilli(int64(when/time.Millisecond) + 1)
			if reported := lease.GetExpiresAt().AsTime(); !reported.Before(ends) {
				t.Errorf("%s: reported expiry %s, but Redis ends the lease at %s", key, reported.Format(time.StampMicro), ends.Format(time.StampMicro))
			}
		}
	}
}
