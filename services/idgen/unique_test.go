package idgen_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// collector records the IDs of one mode and counts duplicates.
type collector struct {
	mu    sync.Mutex
	seen  map[int64]struct{}
	dups  []int64
	max   int64
	total int
}

func (c *collector) add(ids []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range ids {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("ID %q is not decimal: %w", s, err)
		}
		if _, ok := c.seen[n]; ok {
			c.dups = append(c.dups, n)
		}
		c.seen[n] = struct{}{}
		c.max = max(c.max, n)
	}
	c.total += len(ids)
	return nil
}

// TestUniqueAcrossInstancesAndRestart runs three instances on the same stores, each issuing
// perInstance IDs of every numeric mode concurrently (mostly batches, some single IDs), and
// restarts one of them half way: no ID may come twice, and the restarted instance's segments
// must lie above every segment ID issued before it stopped.
func TestUniqueAcrossInstancesAndRestart(t *testing.T) {
	t.Parallel()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			perInstance := 200_000
			if sc.name == "sqlite" {
				perInstance = 50_000 // one file, one writer: the MySQL run is the heavy one
			}
			testUnique(t, withRedis(t, sc.open(t)), perInstance)
		})
	}
}

func testUnique(t *testing.T, cfg setup, perInstance int) {
	ctx := context.Background()
	tag := testenv.Prefix(t)
	modes := []idgenv1.Mode{idgenv1.Mode_MODE_SNOWFLAKE, idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_REDIS_INCR}
	const instances, workersPerMode, batch = 3, 2, 1000

	insts := make([]*instance, instances)
	clients := make([]atomic.Pointer[instance], instances)
	for i := range insts {
		insts[i] = startInstance(t, cfg)
		clients[i].Store(insts[i])
	}
	_, err := insts[0].client.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Step: 1000})
	noErr(t, err)

	seen := map[idgenv1.Mode]*collector{}
	for _, m := range modes {
		seen[m] = &collector{seen: make(map[int64]struct{}, instances*perInstance)}
	}
	var (
		issued     atomic.Int64
		restarted  = make(chan struct{})
		restarting atomic.Bool  // set when instance 1 starts to stop
		restartGen atomic.Int32 // 1 once the restarted instance serves
		maxBefore  int64        // highest segment ID returned before the restart
		afterMu    sync.Mutex
		afterMin   int64 = -1 // lowest segment ID the restarted instance returned
	)
	// Restart instance 1 once half of all IDs are out.
	go func() {
		defer close(restarted)
		for issued.Load() < int64(instances*perInstance*len(modes)/2) {
			time.Sleep(5 * time.Millisecond)
		}
		old := clients[1].Load()
		c := seen[idgenv1.Mode_MODE_SEGMENT]
		c.mu.Lock()
		maxBefore = c.max
		c.mu.Unlock()
		restarting.Store(true)
		if err := old.stop(); err != nil {
			t.Errorf("stop instance 1: %v", err)
		}
		clients[1].Store(startInstance(t, cfg))
		restartGen.Store(1)
	}()

	var wg sync.WaitGroup
	errs := make(chan error, instances*len(modes)*workersPerMode)
	for i := range instances {
		for _, m := range modes {
			for w := range workersPerMode {
				wg.Go(func() {
					req := &idgenv1.NextRequest{Mode: m, Count: batch}
					if m != idgenv1.Mode_MODE_SNOWFLAKE {
						req.Tag = tag
					}
					for left, call := perInstance/workersPerMode, 0; left > 0; call++ {
						req.Count = uint32(min(batch, left))
						if call%20 == w { // a single ID now and then
							req.Count = 1
						}
						inst := clients[i].Load()
						gen := restartGen.Load()
						res, err := inst.client.Next(ctx, req)
						if err != nil {
							// Only the restarting instance may fail, and only while it restarts.
							if i == 1 && restarting.Load() {
								time.Sleep(5 * time.Millisecond)
								continue
							}
							errs <- fmt.Errorf("instance %d %s: %w", i, m, err)
							return
						}
						if err := seen[m].add(res.GetIds()); err != nil {
							errs <- err
							return
						}
						if i == 1 && gen == 1 && m == idgenv1.Mode_MODE_SEGMENT {
							first, _ := strconv.ParseInt(res.GetIds()[0], 10, 64)
							afterMu.Lock()
							if afterMin < 0 || first < afterMin {
								afterMin = first
							}
							afterMu.Unlock()
						}
						left -= len(res.GetIds())
						issued.Add(int64(len(res.GetIds())))
					}
				})
			}
		}
	}
	wg.Wait()
	<-restarted
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, m := range modes {
		c := seen[m]
		if c.total != instances*perInstance || len(c.dups) > 0 {
			t.Errorf("%s: %d IDs with %d duplicates (first %v), want %d unique", m, c.total, len(c.dups), c.dups[:min(len(c.dups), 5)], instances*perInstance)
		}
	}
	if afterMin < 0 {
		t.Fatal("the restarted instance issued no segment ID")
	}
	if afterMin <= maxBefore {
		t.Errorf("restarted instance's lowest segment ID %d is not above %d, the highest issued before the restart", afterMin, maxBefore)
	}
	t.Logf("%d IDs per mode; segment IDs before the restart up to %d, restarted instance from %d", instances*perInstance, maxBefore, afterMin)
}
