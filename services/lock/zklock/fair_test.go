package zklock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// TestFairQueue queues waiters one after another behind a holder and releases the lock again
// and again: the waiters must get it in arrival order, one per release, and (each waiter in
// its own session) a release must wake only the waiter behind the released node, plus at most
// one re-arm of the waiter behind the new holder, whose predecessor's promotion is a write.
func TestFairQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// shared puts every waiter on one backend, as one service instance serving many
		// blocked requests; otherwise each waiter has its own session.
		shared bool
	}{
		{name: "one session per waiter"},
		{name: "waiters sharing a session", shared: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := testRoot(t)
			ctx := context.Background()
			const key, n = "fifo", 4
			holder := openTest(t, root)
			first := mustAcquire(t, holder, key, "holder", 0)

			type result struct {
				i   int
				att lock.Attempt
				err error
			}
			results := make(chan result, n)
			waiters := make([]*Backend, n)
			for i := range n {
				waiters[i] = holder
				if !tt.shared {
					waiters[i] = openTest(t, root)
				}
				go func() {
					att, err := waiters[i].AcquireWait(ctx, key, fmt.Sprintf("w%d", i), 30*time.Second, 20*time.Second)
					results <- result{i, att, err}
				}()
				// Arrival order is the order of the nodes in line: wait for this one's.
				waitLine(t, holder, key, i+2)
			}

			owner, token, via := "holder", first.Lease.FencingToken, holder
			for k := range n {
				before := wakeups(waiters)
				if _, _, err := via.Release(ctx, key, owner, 0); err != nil {
					t.Fatalf("release by %s: %v", owner, err)
				}
				var r result
				select {
				case r = <-results:
				case <-time.After(5 * time.Second):
					t.Fatalf("release by %s: no waiter got the lock within 5s, want w%d", owner, k)
				}
				if r.err != nil || !r.att.Acquired || r.i != k {
					t.Fatalf("after release by %s: waiter w%d got (%+v, %v), want w%d to acquire", owner, r.i, r.att, r.err, k)
				}
				if r.att.Lease.FencingToken <= token {
					t.Fatalf("w%d token %d, want above the previous holder's %d", k, r.att.Lease.FencingToken, token)
				}
				select {
				case r := <-results:
					t.Fatalf("one release let a second waiter through: w%d got (%+v, %v)", r.i, r.att, r.err)
				case <-time.After(200 * time.Millisecond):
				}
				if !tt.shared {
					after := wakeups(waiters)
					for j := k; j < n; j++ {
						woke := after[j] - before[j]
						switch {
						case j == k && woke < 1:
							t.Errorf("release %d: the next waiter w%d was not woken by a watch", k, j)
						case j == k+1 && woke > 1:
							t.Errorf("release %d: w%d, behind the new holder, woke %d times, want at most 1 (the promotion write)", k, j, woke)
						case j > k+1 && woke != 0:
							t.Errorf("release %d: w%d, further back, woke %d times, want 0 (no herd)", k, j, woke)
						}
					}
				}
				owner, token, via = fmt.Sprintf("w%d", k), r.att.Lease.FencingToken, waiters[k]
			}
			if _, _, err := via.Release(ctx, key, owner, 0); err != nil {
				t.Fatalf("last release: %v", err)
			}
			waitLine(t, holder, key, 0)
		})
	}
}

// TestLeaveLine: a waiter that stops waiting leaves the line, and the waiter behind it moves
// up and gets the lock at the next release.
func TestLeaveLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// give makes the first waiter stop waiting; it returns AcquireWait's context and wait.
		give    func() (context.Context, time.Duration)
		wantErr error
	}{
		{
			name: "the wait passes",
			give: func() (context.Context, time.Duration) { return context.Background(), 300 * time.Millisecond },
		},
		{
			name: "the caller cancels",
			give: func() (context.Context, time.Duration) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(300*time.Millisecond, cancel)
				return ctx, 10 * time.Second
			},
			wantErr: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := testRoot(t)
			ctx := context.Background()
			const key = "leave"
			holder, quitter, stayer := openTest(t, root), openTest(t, root), openTest(t, root)
			held := mustAcquire(t, holder, key, "holder", 0)

			quitCtx, wait := tt.give()
			quit := make(chan error, 1)
			var quitAtt lock.Attempt
			go func() {
				var err error
				quitAtt, err = quitter.AcquireWait(quitCtx, key, "quitter", 10*time.Second, wait)
				quit <- err
			}()
			waitLine(t, holder, key, 2)
			stay := make(chan lock.Attempt, 1)
			go func() {
				att, err := stayer.AcquireWait(ctx, key, "stayer", 10*time.Second, 20*time.Second)
				if err != nil {
					t.Errorf("stayer: %v", err)
				}
				stay <- att
			}()
			waitLine(t, holder, key, 3)

			select {
			case err := <-quit:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("quitter: error %v, want %v", err, tt.wantErr)
				}
				if err == nil && (quitAtt.Acquired || quitAtt.Holder.FencingToken != held.Lease.FencingToken) {
					t.Fatalf("quitter: %+v, want not acquired, reporting the holder (token %d)", quitAtt, held.Lease.FencingToken)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("quitter still waiting 3s after it should have stopped")
			}
			waitLine(t, holder, key, 2) // the quitter's node is gone

			if _, _, err := holder.Release(ctx, key, "holder", 0); err != nil {
				t.Fatalf("release: %v", err)
			}
			select {
			case att := <-stay:
				if !att.Acquired {
					t.Fatalf("stayer: %+v, want acquired after the release", att)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("stayer did not get the lock within 5s of the release")
			}
		})
	}
}

func openTest(t *testing.T, root string) *Backend {
	t.Helper()
	return openSession(t, root, 4*time.Second)
}

// openSession opens a backend on the shared ZooKeeper with the given session timeout.
func openSession(t *testing.T, root string, session time.Duration) *Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Open(ctx, testenv.ZooKeeperAddrs(), Config{
		Root: root, SessionTimeout: session, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("Open: %v; start the dev backends with deploy/dev/backends.sh up", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func mustAcquire(t *testing.T, b *Backend, key, owner string, wait time.Duration) lock.Attempt {
	t.Helper()
	att, err := b.AcquireWait(context.Background(), key, owner, 30*time.Second, wait)
	if err != nil || !att.Acquired {
		t.Fatalf("acquire %q as %s: (%+v, %v), want acquired", key, owner, att, err)
	}
	return att
}

// waitLine waits until key's line has n nodes.
func waitLine(t *testing.T, b *Backend, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		names, _, err := b.conn.Children(b.parentPath(key))
		if errors.Is(err, zk.ErrNoNode) {
			names, err = nil, nil
		}
		if err == nil && len(queueOrder(names)) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("line of %q has %d nodes (err %v), want %d", key, len(names), err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wakeups(bs []*Backend) []int64 {
	out := make([]int64, len(bs))
	for i, b := range bs {
		out[i] = b.wakeups.Load()
	}
	return out
}

var nodeUnsafe = regexp.MustCompile(`[^A-Za-z0-9_:-]`)

// testRoot is a root unique to the test, deleted with everything below it when the test ends.
func testRoot(t *testing.T) string {
	t.Helper()
	root := "/coordkit-test/" + nodeUnsafe.ReplaceAllString(testenv.Prefix(t), "_")
	t.Cleanup(func() {
		conn, _, err := zk.Connect(testenv.ZooKeeperAddrs(), 5*time.Second, zk.WithLogger(zkLogger{slog.New(slog.NewTextHandler(io.Discard, nil))}))
		if err != nil {
			return
		}
		defer conn.Close()
		var drop func(p string)
		drop = func(p string) {
			kids, _, _ := conn.Children(p)
			for _, k := range kids {
				drop(p + "/" + k)
			}
			conn.Delete(p, -1) //nolint:errcheck // best effort
		}
		drop(root)
	})
	return root
}
