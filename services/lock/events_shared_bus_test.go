package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/event"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

// TestServicesSharingPrivateBus: a Bus is one process's NATS connection, shared by every
// service the process runs. Two lock services in one process on one store, sharing a private
// embedded bus (no Listen), must wake each other's waiters on a release, as they did when
// each service subscribed to the bus (the periodic re-check is off, so a missed wake-up shows
// as a wait until the holder's 30s ttl).
func TestServicesSharingPrivateBus(t *testing.T) {
	t.Parallel()
	for _, bc := range pollingBackends() {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			open := bc.store(t)
			bus := openBus(t, event.Config{})
			a := startInstanceWith(t, bc.name, open(t), bus)
			b := startInstanceWith(t, bc.name, open(t), bus)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const key, ttl = "shared-private", 30 * time.Second
			held := must(acquireWithin(ctx, a.client, key, ttl))(t)
			waiting := acquireAsync(ctx, b.client, waitFor(key, ttl, 20*time.Second, false))
			time.Sleep(200 * time.Millisecond) // the waiter is in line
			released := time.Now()
			must(a.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: held.GetOwner(), FencingToken: held.GetFencingToken()}))(t)
			got := <-waiting
			if got.err != nil || !got.res.GetAcquired() {
				t.Fatalf("waiter on the other service = %v, %v; want acquired (not woken by the release within its 20s wait)", got.res, got.err)
			}
			if d := got.at.Sub(released); d > 5*time.Second {
				t.Fatalf("the waiter got the lock %v after the release: not woken by it", d)
			}
		})
	}
}
