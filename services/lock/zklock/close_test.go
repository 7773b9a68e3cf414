package zklock

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestCloseLeavesSessionToExpire: a graceful Close (a coord instance's SIGTERM) must not free
// the locks held through it before the expiry their holders were told: a rival trying all
// the while is refused until then, and gets the lock once the session has expired. A Close
// that ended the session would hand the lock over within milliseconds.
func TestCloseLeavesSessionToExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	a, rival := openTest(t, root), openTest(t, root)
	held, err := a.TryAcquire(ctx, "k", "o", time.Hour)
	if err != nil || !held.Acquired {
		t.Fatalf("acquire: (%+v, %v)", held, err)
	}
	closed := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(closed); d > 2*time.Second {
		t.Errorf("Close took %v: abandoning the session must not wait for the library's timeouts", d)
	}
	if _, err := a.Inspect(ctx, "k"); err == nil {
		t.Error("Inspect on a closed backend succeeded, want an error")
	}
	for {
		att, err := rival.TryAcquire(ctx, "k", "r", time.Second)
		if err != nil {
			t.Fatalf("rival: %v", err)
		}
		if att.Acquired {
			if now := time.Now(); now.Before(held.Lease.ExpiresAt) {
				t.Fatalf("rival got the lock %v after Close, %v before the holder's reported expiry",
					now.Sub(closed), held.Lease.ExpiresAt.Sub(now))
			}
			if att.Lease.FencingToken <= held.Lease.FencingToken {
				t.Fatalf("rival's token %d, want above the old lease's %d", att.Lease.FencingToken, held.Lease.FencingToken)
			}
			t.Logf("rival got the lock %v after Close (session timeout 4s)", time.Since(closed))
			return
		}
		if time.Since(closed) > 30*time.Second {
			t.Fatal("the closed backend's session never expired: its lock is held for good")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCloseTakesBackOrphans: a graceful Close removes the waiter nodes its calls left to
// housekeeping before it drops the connection (the session, and so any lease, is left to
// expire): they would otherwise hold everyone behind them in line until their ttl. The
// orphan is queued without waking housekeeping, so only Close can take it back in time.
func TestCloseTakesBackOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	const key = "orphan"
	// a's session outlasts waitLine's 5s: its expiry cannot empty the line in time.
	a, watcher := openSession(t, root, 15*time.Second), openTest(t, root)
	path, err := a.enqueue(ctx, a.parentPath(key), false, nodeData{Owner: "gone", TTLms: time.Minute.Milliseconds()})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	waitLine(t, watcher, key, 1)
	a.orphans.retry(orphan{path: path})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitLine(t, watcher, key, 0)
	att, err := watcher.TryAcquire(ctx, key, "next", time.Second)
	if err != nil || !att.Acquired {
		t.Fatalf("the next caller: (%+v, %v), want the lock at once", att, err)
	}
}

// TestCloseBoundedOnSilentEnsemble: with ZooKeeper silent while housekeeping is in the middle
// of taking an orphan back, Close gives up on the orphans after closeReclaimTimeout instead of
// waiting for housekeeping's round, which only ends when the client library gives up on the
// connection (two thirds of the session timeout).
func TestCloseBoundedOnSilentEnsemble(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := testRoot(t)
	p := testenv.NewProxy(t, testenv.ZooKeeperAddrs()[0])
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := Open(octx, []string{p.Addr()}, Config{Root: root, SessionTimeout: 15 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	path, err := a.enqueue(ctx, a.parentPath("silent"), false, nodeData{Owner: "gone", TTLms: time.Minute.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	p.Stall()
	defer p.Resume()
	a.orphans.add(orphan{path: path}) // wakes housekeeping, whose delete now hangs
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > closeReclaimTimeout+2*time.Second {
		t.Errorf("Close took %v on a silent ensemble, want about closeReclaimTimeout (%v)", d, closeReclaimTimeout)
	}
}
