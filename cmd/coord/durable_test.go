package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/lock/sqllock"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// durableDirEnv names the data directory of TestDurableChild's writer.
const durableDirEnv = "COORD_DURABLE_DIR"

// Keys of the durability test's writes.
const (
	durableTag  = "durable"
	durableKey  = "durable:key"
	durablePool = "durable"
)

// durableStores are the embedded stores the durability test writes to and reads back.
type durableStores struct {
	seg   *segment.Engine
	locks *sqllock.Backend
	tasks *sqltask.Backend
	close func()
}

func openDurable(ctx context.Context, dir string) (*durableStores, error) {
	ids, err := sqldb.OpenSQLite(ctx, filepath.Join(dir, "idgen.db"))
	if err != nil {
		return nil, err
	}
	store, err := segment.NewStore(ctx, ids)
	if err != nil {
		return nil, err
	}
	seg := segment.New(store, segment.Config{Logger: slog.New(slog.DiscardHandler)})
	// The janitor deletes every released row at once, so the fence floors carry the tokens.
	locks, err := sqllock.OpenSQLite(ctx, filepath.Join(dir, "locks.db"), sqllock.Config{
		KeepFree: sqllock.Off, ReclaimInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	tasks, err := sqltask.OpenSQLite(ctx, filepath.Join(dir, "tasks.db"), sqltask.Config{})
	if err != nil {
		return nil, err
	}
	return &durableStores{seg: seg, locks: locks, tasks: tasks, close: func() {
		seg.Close()
		ids.Close()
		locks.Close()
		tasks.Close()
	}}, nil
}

// TestDurableChild is the writer TestDurableAfterKill kills: run on its own it does nothing.
// It writes to the embedded stores as fast as it can and prints each write once it was
// acknowledged: "id N" (a segment ID handed out), "fence N" (a lock's fencing token, the lock
// then released and its row reclaimed into the fence floor), "put ID" (a task Put created).
func TestDurableChild(t *testing.T) {
	dir := os.Getenv(durableDirEnv)
	if dir == "" {
		t.Skip("the writer of TestDurableAfterKill")
	}
	ctx := context.Background()
	s, err := openDurable(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout)
	owner := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := 0; ; i++ {
		ids, err := s.seg.Next(ctx, durableTag, 7)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "id %d\n", ids[len(ids)-1])
		// A short lease: the writer killed before it released holds it for 200ms after the
		// restart.
		att, err := s.locks.TryAcquire(ctx, durableKey, owner, 200*time.Millisecond)
		for err == nil && !att.Acquired {
			time.Sleep(5 * time.Millisecond)
			att, err = s.locks.TryAcquire(ctx, durableKey, owner, 200*time.Millisecond)
		}
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		fmt.Fprintf(out, "fence %d\n", att.Lease.FencingToken)
		if _, _, err := s.locks.Release(ctx, durableKey, owner, att.Lease.FencingToken); err != nil {
			t.Fatal(err)
		}
		id := owner + "-" + strconv.Itoa(i)
		created, err := s.tasks.Put(ctx, durablePool, []taskpick.NewTask{{ID: id, MaxAttempts: 1}})
		if err != nil || !created[0].Created {
			t.Fatalf("put: %v, %v", created, err)
		}
		fmt.Fprintf(out, "put %s\n", id)
		out.Flush()
	}
}

// TestDurableAfterKill kills a process writing to the embedded stores (segment IDs, lock
// fences, task Puts) at random moments with SIGKILL, reopens the stores and checks that
// nothing it acknowledged was lost: no segment ID is handed out again, fencing tokens never
// go back, every acknowledged task is there.
//
// SIGKILL leaves the kernel's page cache alone, so this shows that every acknowledged write
// was committed, not that it reached the disk: that is synchronous=FULL on every connection,
// which sqldb's TestSQLiteSynchronousFullOnEveryConnection reads back.
func TestDurableAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s, err := openDurable(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.seg.CreateTag(ctx, durableTag, 1, 10, ""); err != nil {
		t.Fatal(err)
	}
	s.close()
	var maxID, maxFence uint64
	var puts []string
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDurableChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), durableDirEnv+"="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// Killed at a random moment once it acknowledged its first write, wherever it is.
		seen := 0
		var killer *time.Timer
		for line := range lines {
			seen++
			if killer == nil {
				killer = time.AfterFunc(time.Duration(10+rand.IntN(150))*time.Millisecond, func() { cmd.Process.Kill() })
			}
			kind, v, _ := strings.Cut(line, " ")
			switch kind {
			case "id", "fence":
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("writer said %q", line)
				}
				if kind == "id" {
					maxID = max(maxID, n)
				} else {
					maxFence = max(maxFence, n)
				}
			case "put":
				puts = append(puts, v)
			}
		}
		if err := cmd.Wait(); killer == nil || !strings.Contains(fmt.Sprint(err), "killed") {
			t.Fatalf("round %d: the writer ended by itself after %d lines: %v", round, seen, err)
		}

		s, err := openDurable(ctx, dir)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		ids, err := s.seg.Next(ctx, durableTag, 1)
		if err != nil || uint64(ids[0]) <= maxID {
			t.Fatalf("round %d: next ID %v (%v), but %d was handed out before the kill", round, ids, err, maxID)
		}
		// The lock is free, or held by the killed writer's unacknowledged last acquire.
		att, err := s.locks.TryAcquire(ctx, durableKey, "checker", time.Second)
		token := att.Lease.FencingToken
		if !att.Acquired {
			token = att.Holder.FencingToken
		}
		if err != nil || token <= maxFence {
			t.Fatalf("round %d: fencing token %d (%+v, %v), but %d was given before the kill", round, token, att, err, maxFence)
		}
		if att.Acquired {
			if _, _, err := s.locks.Release(ctx, durableKey, "checker", token); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range puts {
			if _, err := s.tasks.Get(ctx, durablePool, id); err != nil {
				t.Fatalf("round %d: acknowledged task %s: %v", round, id, err)
			}
		}
		t.Logf("round %d: killed after %d acknowledged writes; max id %d, fence %d, %d tasks: all there", round, seen, maxID, maxFence, len(puts))
		s.close()
	}
}

// TestServeRefusesUnknownSynchronous: a typo in --sqlite-synchronous stops coord serve
// instead of silently meaning either mode.
func TestServeRefusesUnknownSynchronous(t *testing.T) {
	err := run(context.Background(), []string{"serve", "--addr", freeAddr(t), "--data-dir", t.TempDir(),
		"--sqlite-synchronous", "off"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--sqlite-synchronous") {
		t.Fatalf("serve --sqlite-synchronous off: %v, want an error naming the flag", err)
	}
}
