package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// TestConcurrentSameOwnerAcquireKeepsLease: an acquire by the same owner (Y) that runs
// entirely between another acquire's (X) two rounds meets X's pending takes. It must neither
// count a hold on them nor give one back: it reports busy, held by the owner itself, and X's
// lease comes out with exactly one hold on every node, which another owner cannot take.
func TestConcurrentSameOwnerAcquireKeepsLease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	const key, me = "k", "me"

	var direct []redis.Scripter
	for _, d := range c.direct {
		direct = append(direct, d)
	}
	y := New(direct, Config{Prefix: c.prefix, NodeTimeout: 5 * time.Second})

	var once sync.Once
	var seen string // the holder id Y saw between X's rounds
	var xClients []redis.Scripter
	for _, d := range c.direct {
		xClients = append(xClients, hookedScripter{d, func(sha string) {
			if sha != stampScript.Hash() {
				return
			}
			once.Do(func() {
				att, err := y.TryAcquire(context.Background(), key, me, time.Minute)
				if err != nil || att.Acquired || !att.Holder.Held || att.Holder.HolderID == "" {
					t.Errorf("Y TryAcquire between X's rounds = %+v, %v; want busy, held by itself", att, err)
				}
				seen = att.Holder.HolderID
			})
		}})
	}
	x := New(xClients, Config{Prefix: c.prefix, NodeTimeout: 5 * time.Second})

	att, err := x.TryAcquire(context.Background(), key, me, time.Minute)
	if err != nil || !att.Acquired {
		t.Fatalf("X TryAcquire = %+v, %v; want acquired", att, err)
	}
	if seen != att.Lease.HolderID {
		t.Fatalf("Y saw holder %q between X's rounds, X's lease is %q; want the same lease", seen, att.Lease.HolderID)
	}
	tok := int64(att.Lease.FencingToken)
	c.wantHolds(key, []hold{{me, tok, 1}, {me, tok, 1}, {me, tok, 1}})

	other, err := c.open().TryAcquire(context.Background(), key, "other", time.Minute)
	if err != nil || other.Acquired {
		t.Fatalf("another owner's TryAcquire while %q holds the lease = %+v, %v; want busy", me, other, err)
	}
	// Now Y re-enters for real, and one release by each leaves the lock free.
	again, err := y.TryAcquire(context.Background(), key, me, time.Minute)
	if err != nil || !again.Acquired || again.Lease.HoldCount != 2 || again.Lease.FencingToken != att.Lease.FencingToken {
		t.Fatalf("Y re-entry after X confirmed = %+v, %v; want hold 2, token %d", again, err, tok)
	}
	for want := uint32(1); ; want-- {
		left, _, err := y.Release(context.Background(), key, me, 0)
		if err != nil || left != want {
			t.Fatalf("Release = %d, %v; want %d", left, err, want)
		}
		if want == 0 {
			break
		}
	}
	c.wantHolds(key, []hold{{}, {}, {}})
}
