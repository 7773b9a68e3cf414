package redisincr_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/redisincr"
)

// TestClusterHostileTags: two engines, each on its own client of a three-master cluster, hand
// out IDs of tags whose braces move the hash tag around: every tag's IDs are unique across
// both engines and increasing within each call.
func TestClusterHostileTags(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisClusterOf(t, testenv.RedisClusterConfig{Masters: 3, Password: "pw"})
	ctx := context.Background()
	open := func() *redisincr.Engine {
		rdb, err := redisconf.Open(ctx, redisconf.Config{URL: cluster.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Close() })
		e := redisincr.New(rdb, redisincr.Config{Block: 10})
		t.Cleanup(func() { e.Close() })
		return e
	}
	engines := []*redisincr.Engine{open(), open()}
	tags := []string{"}", "{", "{}", "}{", "{a}b", "x{}y{z}", "\xff{\xfe}", strings.Repeat("}", 128), "{" + strings.Repeat("t", 126) + "}"}
	for _, tag := range tags {
		var mu sync.Mutex
		seen := map[int64]bool{}
		var wg sync.WaitGroup
		for _, e := range engines {
			wg.Go(func() {
				for range 20 {
					ids, err := e.Next(ctx, tag, 7)
					if err != nil {
						t.Errorf("Next(%q): %v", tag, err)
						return
					}
					mu.Lock()
					for i, id := range ids {
						if seen[id] || (i > 0 && id <= ids[i-1]) {
							t.Errorf("tag %q: id %d repeated or out of order in %v", tag, id, ids)
						}
						seen[id] = true
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != 2*20*7 {
			t.Fatalf("tag %q: %d distinct ids, want %d", tag, len(seen), 2*20*7)
		}
	}
}
