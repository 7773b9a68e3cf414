package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/services/lock/redislock"
)

// hookedScripter runs before(sha) ahead of every script call to the node.
type hookedScripter struct {
	redis.Scripter
	before func(sha string)
}

func (h hookedScripter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	h.before(sha)
	return h.Scripter.EvalSha(ctx, sha, keys, args...)
}

func (h hookedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return h.Scripter.Eval(ctx, script, keys, args...)
}

// TestConcurrentSameOwnerAcquireKeepsLease: an acquire by the same owner that runs its first
// round between another acquire's two rounds re-enters the unconfirmed take, reports busy and
// gives its hold back. The second round must not overwrite that hold count, or giving the hold
// back deletes the lease the first acquire just returned, and another owner takes the lock.
func TestConcurrentSameOwnerAcquireKeepsLease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"

	firstRoundDone := make(chan struct{})
	xDone := make(chan struct{})
	var yRound1, yUndo sync.Once
	var yClients []redis.Scripter
	for _, d := range c.direct {
		yClients = append(yClients, hookedScripter{d, func(sha string) {
			if sha == redislock.ReleaseScript.Hash() {
				yRound1.Do(func() { close(firstRoundDone) })
				<-xDone // Y gives its hold back only after X confirmed its lease
			}
		}})
	}
	y := New(yClients, Config{Prefix: c.prefix, NodeTimeout: 5 * time.Second})

	var yWG sync.WaitGroup
	var xClients []redis.Scripter
	for _, d := range c.direct {
		xClients = append(xClients, hookedScripter{d, func(sha string) {
			if sha == stampScript.Hash() {
				yUndo.Do(func() {
					yWG.Add(1)
					go func() {
						defer yWG.Done()
						att, err := y.TryAcquire(context.Background(), key, me, time.Minute)
						if err != nil || att.Acquired {
							t.Errorf("Y TryAcquire = %+v, %v; want busy, held by itself", att, err)
						}
					}()
					<-firstRoundDone
				})
			}
		}})
	}
	x := New(xClients, Config{Prefix: c.prefix, NodeTimeout: 5 * time.Second})

	att, err := x.TryAcquire(context.Background(), key, me, time.Minute)
	close(xDone)
	yWG.Wait()
	if err != nil || !att.Acquired {
		t.Fatalf("X TryAcquire = %+v, %v; want acquired", att, err)
	}
	c.wantHolds(key, []hold{{me, int64(att.Lease.FencingToken), 1}, {me, int64(att.Lease.FencingToken), 1}, {me, int64(att.Lease.FencingToken), 1}})

	other, err := c.open().TryAcquire(context.Background(), key, "other", time.Minute)
	if err != nil || other.Acquired {
		t.Fatalf("another owner's TryAcquire while %q holds the lease = %+v, %v; want busy", me, other, err)
	}
}
