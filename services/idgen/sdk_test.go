package idgen_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// The Go SDK's IDs (libs/client) against real ID services: it lives in libs, but the
// service it needs to be tested against lives here.

// sdkMode is one mode the SDK buffers, with what it promises beyond uniqueness.
type sdkMode struct {
	mode idgenv1.Mode
	// numeric IDs are decimal; otherwise UUIDs.
	numeric bool
	// ordered: the IDs one goroutine gets from one client of one instance strictly
	// increase (numerically, or as text for UUIDs v7).
	ordered bool
}

var sdkModes = []sdkMode{
	{mode: idgenv1.Mode_MODE_UUID_V4},
	{mode: idgenv1.Mode_MODE_UUID_V7, ordered: true},
	{mode: idgenv1.Mode_MODE_SNOWFLAKE, numeric: true, ordered: true},
	{mode: idgenv1.Mode_MODE_SEGMENT, numeric: true, ordered: true},
	{mode: idgenv1.Mode_MODE_REDIS_INCR, numeric: true, ordered: true},
}

// tagOf is the tag a test uses for mode: its own for the tagged modes, none for the others.
func tagOf(t testing.TB, mode idgenv1.Mode) string {
	if mode == idgenv1.Mode_MODE_SEGMENT || mode == idgenv1.Mode_MODE_REDIS_INCR {
		return testenv.Prefix(t)
	}
	return ""
}

// createTag creates tag with step on inst when mode needs it.
func createTag(t testing.TB, inst *instance, mode idgenv1.Mode, tag string, step int64) {
	t.Helper()
	if mode != idgenv1.Mode_MODE_SEGMENT {
		return
	}
	_, err := inst.client.CreateTag(context.Background(), &idgenv1.CreateTagRequest{Tag: tag, Step: step})
	noErr(t, err)
}

// less orders two IDs of m as the service issues them.
func (m sdkMode) less(a, b string) bool {
	if !m.numeric {
		return a < b // lowercase hex of fixed length: text order is numeric order
	}
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return x < y
}

// Many goroutines share one IDs value while a rival client draws from another instance on
// the same stores, half of them by Next and half by NextN: no ID comes twice, in any mode,
// and each goroutine's IDs increase where the mode promises it. Small blocks make every
// goroutine cross many refills; the shared client's blocks grow, the rival's stay fixed.
func TestSDKUniqueAcrossGoroutinesAndClients(t *testing.T) {
	t.Parallel()
	for _, sc := range stores {
		for _, m := range sdkModes {
			if sc.name != "sqlite" && m.mode != idgenv1.Mode_MODE_SEGMENT && m.mode != idgenv1.Mode_MODE_SNOWFLAKE {
				continue // the store only matters to segments and worker leases
			}
			t.Run(sc.name+"/"+m.mode.String(), func(t *testing.T) {
				t.Parallel()
				cfg := withRedis(t, sc.open(t))
				a, b := startInstance(t, cfg), startInstance(t, cfg)
				tag := tagOf(t, m.mode)
				createTag(t, a, m.mode, tag, 50)
				shared := client.New(a.url, client.WithIDBlock(10), client.WithIDMaxBlock(400)).IDs()
				rival := client.New(b.url, client.WithIDBlock(30), client.WithIDMaxBlock(30)).IDs()

				const sharedGoroutines, rivalGoroutines, each = 8, 3, 3000
				var (
					mu       sync.Mutex
					seen     = make(map[string]int, (sharedGoroutines+rivalGoroutines)*each)
					problems []string
					wg       sync.WaitGroup
				)
				draw := func(g int, ids *client.IDs) {
					got := make([]string, 0, each)
					for len(got) < each {
						if g%2 == 0 {
							id, err := ids.Next(context.Background(), m.mode, tag)
							if err != nil {
								mu.Lock()
								problems = append(problems, fmt.Sprintf("goroutine %d: Next: %v", g, err))
								mu.Unlock()
								return
							}
							got = append(got, id)
							continue
						}
						batch, err := ids.NextN(context.Background(), m.mode, tag, min(1+len(got)%37, each-len(got)))
						if err != nil {
							mu.Lock()
							problems = append(problems, fmt.Sprintf("goroutine %d: NextN: %v", g, err))
							mu.Unlock()
							return
						}
						got = append(got, batch...)
					}
					mu.Lock()
					defer mu.Unlock()
					for i, id := range got {
						if prev, ok := seen[id]; ok {
							problems = append(problems, fmt.Sprintf("%s handed out to goroutine %d and to goroutine %d", id, prev, g))
						}
						seen[id] = g
						if m.ordered && i > 0 && !m.less(got[i-1], id) {
							problems = append(problems, fmt.Sprintf("goroutine %d got %s after %s", g, id, got[i-1]))
						}
					}
				}
				for g := range sharedGoroutines {
					wg.Go(func() { draw(g, shared) })
				}
				for g := range rivalGoroutines {
					wg.Go(func() { draw(sharedGoroutines+g, rival) })
				}
				wg.Wait()
				if len(problems) > 0 {
					t.Fatalf("%d problems, first %v", len(problems), problems[:min(len(problems), 5)])
				}
				if want := (sharedGoroutines + rivalGoroutines) * each; len(seen) != want {
					t.Fatalf("%d distinct IDs, want %d", len(seen), want)
				}
			})
		}
	}
}

// faultyInstance is an instance of the ID service behind a proxy the test can cut or stall,
// with an SDK client of its own whose blocks have one fixed size.
func faultyInstance(t *testing.T, mode idgenv1.Mode, block int) (*client.IDs, *testenv.Proxy, string) {
	t.Helper()
	inst := startInstance(t, withRedis(t, sqliteSetup(t)))
	tag := tagOf(t, mode)
	createTag(t, inst, mode, tag, 1000)
	proxy := testenv.NewProxy(t, inst.url[len("http://"):])
	ids := client.New("http://"+proxy.Addr(), client.WithIDBlock(block), client.WithIDMaxBlock(block)).IDs()
	return ids, proxy, tag
}

// take draws n IDs with Next and fails the test on an error or an ID seen before.
func take(t *testing.T, ids *client.IDs, mode idgenv1.Mode, tag string, n int, seen map[string]bool) {
	t.Helper()
	for i := range n {
		id, err := ids.Next(context.Background(), mode, tag)
		if err != nil {
			t.Fatalf("Next %d of %d with IDs still buffered: %v", i+1, n, err)
		}
		if seen[id] {
			t.Fatalf("%s handed out twice", id)
		}
		seen[id] = true
	}
}

// wantCallError fails unless Next fails with the error of the call to the service as
// Connect returned it. Connect calls a connection the proxy resets canceled, and one it
// closes or refuses unavailable; with no context of the caller's that could end, either
// can only be the call's own.
func wantCallError(t *testing.T, ids *client.IDs, mode idgenv1.Mode, tag string) {
	t.Helper()
	id, err := ids.Next(context.Background(), mode, tag)
	if err == nil {
		t.Fatalf("Next = %s with the service cut off and the buffer used up, want an error", id)
	}
	var ce *connect.Error
	if code := connect.CodeOf(err); !errors.As(err, &ce) || (code != connect.CodeUnavailable && code != connect.CodeCanceled) {
		t.Fatalf("Next with the service cut off = %v (code %v), want the Connect error of the call: unavailable or canceled", err, code)
	}
}

// A fetch that fails while IDs are buffered stays silent: the caller sees its error only
// once the buffer is used up and its own fetch fails too; a failed background fetch is
// tried again by a later Next, which keeps the buffer from running dry.
func TestSDKFailedRefill(t *testing.T) {
	t.Parallel()
	const block = 100
	for _, m := range sdkModes {
		t.Run(m.mode.String(), func(t *testing.T) {
			t.Parallel()
			ids, proxy, tag := faultyInstance(t, m.mode, block)
			seen := map[string]bool{}

			// The first block, then the service goes away before 10% of it is used: the
			// background fetch fails, and nothing shows until the block is used up.
			take(t, ids, m.mode, tag, 1, seen)
			proxy.Cut()
			take(t, ids, m.mode, tag, block-1, seen)
			wantCallError(t, ids, m.mode, tag)
			wantCallError(t, ids, m.mode, tag)

			// Back again: the next Next fetches in the foreground.
			proxy.Restore()
			take(t, ids, m.mode, tag, 1, seen)

			// A failed background fetch is retried by a later Next once its pause is over,
			// and the block it brings lasts beyond the next cut.
			proxy.Cut()
			take(t, ids, m.mode, tag, 10, seen) // 11% used: the background fetch fails
			proxy.Restore()
			time.Sleep(50 * time.Millisecond)  // past the first pause (10ms)
			take(t, ids, m.mode, tag, 1, seen) // retries
			time.Sleep(2 * time.Second)        // the retry lands, far quicker than this
			proxy.Cut()
			take(t, ids, m.mode, tag, block-12+block, seen)
			wantCallError(t, ids, m.mode, tag)
		})
	}
}

// A Next that waits for a fetch returns when its context ends, with the context's error as
// a Connect error; the fetch it left still lands and serves the next caller.
func TestSDKContextEndsWhileWaiting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		code connect.Code
		is   error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, connect.CodeDeadlineExceeded, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, connect.CodeCanceled, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mode := idgenv1.Mode_MODE_SEGMENT
			ids, proxy, tag := faultyInstance(t, mode, 100)
			proxy.Stall()
			ctx, cancel := tt.ctx()
			defer cancel()
			begin := time.Now()
			id, err := ids.Next(ctx, mode, tag)
			if waited := time.Since(begin); waited > time.Second {
				t.Fatalf("Next returned %v after its context ended at 100ms", waited)
			}
			if err == nil || connect.CodeOf(err) != tt.code || !errors.Is(err, tt.is) {
				t.Fatalf("Next with a stalled service = %q, %v; want a Connect %v error matching %v", id, err, tt.code, tt.is)
			}
			proxy.Resume()
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := ids.Next(ctx, mode, tag); err != nil {
				t.Fatalf("Next after the service came back: %v", err)
			}
		})
	}
}

// An IDs that is dropped leaves no goroutine behind: fetches end with their call. Not
// parallel, so that the goroutines counted are this test's.
func TestSDKLeavesNoGoroutine(t *testing.T) {
	cfg := withRedis(t, sqliteSetup(t))
	inst := startInstance(t, cfg)
	tags := map[idgenv1.Mode]string{}
	for _, m := range sdkModes {
		tags[m.mode] = tagOf(t, m.mode)
		createTag(t, inst, m.mode, tags[m.mode], 1000)
	}
	// Warm the service (its connections, buffers and worker lease) with a client of its own.
	warm := client.New(inst.url).IDs()
	for _, m := range sdkModes {
		_, err := warm.Next(context.Background(), m.mode, tags[m.mode])
		noErr(t, err)
	}
	settle := func() int {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	before := settle()

	hc := client.DefaultHTTPClient()
	ids := client.New(inst.url, client.WithHTTPClient(hc), client.WithIDBlock(10)).IDs()
	var wg sync.WaitGroup
	for _, m := range sdkModes {
		for range 4 {
			wg.Go(func() {
				for range 2000 {
					if _, err := ids.Next(context.Background(), m.mode, tags[m.mode]); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for {
		hc.CloseIdleConnections() // the HTTP client's own idle connections are not the SDK's
		after := settle()
		if after <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 15s after the IDs was dropped, %d before it was used:\n%s",
				after, before, buf[:runtime.Stack(buf, true)])
		}
	}
}

// BenchmarkSDKNext is one goroutine calling Next on an in-process service: the IDs per
// second the SDK hands out from its blocks.
func BenchmarkSDKNext(b *testing.B) {
	for _, mode := range []idgenv1.Mode{idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_REDIS_INCR, idgenv1.Mode_MODE_SNOWFLAKE, idgenv1.Mode_MODE_UUID_V7} {
		b.Run(mode.String(), func(b *testing.B) {
			inst := startInstance(b, withRedis(b, sqliteSetup(b)))
			tag := tagOf(b, mode)
			createTag(b, inst, mode, tag, 1000)
			ids := client.New(inst.url).IDs()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ids.Next(ctx, mode, tag); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
		})
	}
}
