package redislock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
)

func floodPipelined(t *testing.T, b *Backend, during func(stop <-chan struct{})) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	for g := range 64 {
		wg.Go(func() {
			for i := 0; i < 60; i++ {
				key := fmt.Sprintf("x12-%d-%d-%d", g, i, time.Now().UnixNano())
				att, err := b.TryAcquire(ctx, key, "owner-0123456789abcdef", time.Minute)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if !att.Acquired || att.Lease.HoldCount != 1 {
					t.Errorf("%s: %+v", key, att)
				}
				if _, _, err := b.Release(ctx, key, "owner-0123456789abcdef", 0); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, "release: "+err.Error())
					continue
				}
				ok.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { during(stop); close(done) }()
	wg.Wait()
	close(stop)
	<-done
	t.Logf("ok %d failed %d first error %v", ok.Load(), failed.Load(), firstErr.Load())
	if failed.Load() > 0 {
		t.Errorf("%d operations failed: %v", failed.Load(), firstErr.Load())
	}
}

// TestPipelinedScriptFlush: SCRIPT FLUSH while scripts are pipelined.
func TestPipelinedScriptFlush(t *testing.T) {
	rdb := testenv.Redis(t, "")
	other := testenv.Redis(t, "")
	b := New(redisconf.Pipelined(rdb), Config{Prefix: testenv.Prefix(t)})
	floodPipelined(t, b, func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			other.ScriptFlush(context.Background())
			time.Sleep(time.Millisecond)
		}
	})
}

// TestPipelinedCluster: a Pipelined cluster client of three masters, keys on every node.
func TestPipelinedCluster(t *testing.T) {
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3})
	rdb, err := redisconf.Open(context.Background(), redisconf.Config{URL: cluster.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	b := New(redisconf.Pipelined(rdb), Config{})
	floodPipelined(t, b, func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range cluster.Nodes {
				c := redis.NewClient(&redis.Options{Addr: n.Addr()})
				c.ScriptFlush(context.Background())
				c.Close()
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
}
