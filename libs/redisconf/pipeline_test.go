package redisconf_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
)

var echo = redis.NewScript(`return ARGV[1]`)

// TestPipelinedShortDeadlines: callers whose contexts end while their script is queued or
// in flight, among callers that wait: everyone who gets an answer gets its own.
func TestPipelinedShortDeadlines(t *testing.T) {
	rdb := testenv.Redis(t, "")
	s := redisconf.Pipelined(rdb)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 300 {
				want := fmt.Sprintf("%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(300))*time.Microsecond)
				if g%2 == 0 {
					ctx, cancel = context.WithCancel(context.Background())
				}
				got, err := echo.Run(ctx, s, []string{"x12"}, want).Text()
				cancel()
				if err == nil && got != want {
					t.Errorf("asked %s, got %s", want, got)
				}
				if g%2 == 0 && err != nil {
					t.Errorf("a caller without a deadline failed: %v", err)
				}
			}
		})
	}
	wg.Wait()
}
