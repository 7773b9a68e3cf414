package redisconf_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/testenv"
)

// inFlight counts the round trips a client has in flight, and their peak. The handshake of
// a connection being dialed (HELLO, CLIENT SETINFO) runs inside the round trip that needed
// the connection, so it does not count.
type inFlight struct{ now, peak atomic.Int32 }

func (f *inFlight) enter() {
	n := f.now.Add(1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
}

func (f *inFlight) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *inFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if testenv.RedisHandshake(cmd) {
			return next(ctx, cmd)
		}
		f.enter()
		defer f.now.Add(-1)
		return next(ctx, cmd)
	}
}

func (f *inFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if testenv.RedisHandshake(cmds[0]) {
			return next(ctx, cmds)
		}
		f.enter()
		defer f.now.Add(-1)
		return next(ctx, cmds)
	}
}

// TestRunScriptsShareTheSlots: callers that each run many scripts at once through a
// Pipelined scripter, among callers that run one, never have more round trips in flight
// than its pipelines (2): a burst of batches must not take a connection each. Every script
// gets its own reply, some callers giving up early all the while.
func TestRunScriptsShareTheSlots(t *testing.T) {
	rdb := testenv.Redis(t, "")
	var f inFlight
	rdb.AddHook(&f)
	s := redisconf.Pipelined(rdb)
	if err := echo.Load(context.Background(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Go(func() {
			for round := range 40 {
				ctx, cancel := context.WithCancel(context.Background())
				if g%3 == 2 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(300))*time.Microsecond)
				}
				if g%4 == 0 {
					want := fmt.Sprintf("%d-%d", g, round)
					if got, err := echo.Run(ctx, s, []string{"x"}, want).Text(); err == nil && got != want {
						t.Errorf("asked %s, got %s", want, got)
					}
					cancel()
					continue
				}
				calls := make([]redisconf.ScriptCall, 1+(g+round)%40)
				for i := range calls {
					calls[i] = redisconf.ScriptCall{Script: echo, Keys: []string{"x"}, Args: []any{fmt.Sprintf("%d-%d-%d", g, round, i)}}
				}
				for i, cmd := range redisconf.RunScripts(ctx, s, calls) {
					got, err := cmd.Text()
					if want := calls[i].Args[0]; err == nil && got != want {
						t.Errorf("asked %s, got %s", want, got)
					}
					if err != nil && g%3 != 2 {
						t.Errorf("a caller without a deadline failed: %v", err)
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if p := f.peak.Load(); p > 2 {
		t.Errorf("%d round trips in flight at once; a Pipelined scripter keeps at most 2", p)
	}
}

// panicky is a Scripter whose scripts panic: a bug in a driver.
type panicky struct{ redis.Scripter }

func (panicky) EvalSha(context.Context, string, []string, ...any) *redis.Cmd { panic("driver bug") }

// TestRunScriptsPanicReachesCaller: a script that panics on a Scripter that cannot pipeline
// runs on a goroutine RunScripts starts; its panic must come back to the caller's goroutine,
// where the caller's recovery can see it, instead of killing the process.
func TestRunScriptsPanicReachesCaller(t *testing.T) {
	rdb := testenv.Redis(t, "")
	calls := []redisconf.ScriptCall{{Script: echo, Keys: []string{"x"}, Args: []any{"a"}}, {Script: echo, Keys: []string{"x"}, Args: []any{"b"}}}
	defer func() {
		if p := recover(); p != "driver bug" {
			t.Errorf("recovered %v, want the driver's panic", p)
		}
	}()
	redisconf.RunScripts(context.Background(), panicky{rdb}, calls)
	t.Error("RunScripts returned; want its panic")
}
