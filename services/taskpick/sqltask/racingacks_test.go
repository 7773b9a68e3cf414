package sqltask_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestPostgresRacingAcksFinishEachLeaseOnce acks every lease of 100 picked tasks from 4
// goroutines at once, beside Acks that present a wrong digest: exactly one Ack per lease is
// done, the others find the task gone, and a wrong digest finishes nothing.
func TestPostgresRacingAcksFinishEachLeaseOnce(t *testing.T) {
	ctx := context.Background()
	b, err := sqltask.New(ctx, openEngine(t, "postgres", 16), sqltask.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const n, racers = 100, 4
	const pool = "racing-acks"
	tasks := make([]taskpick.NewTask, n)
	for i := range tasks {
		tasks[i] = taskpick.NewTask{ID: fmt.Sprint("t", i), MaxAttempts: 3}
	}
	if _, err := b.Put(ctx, pool, tasks); err != nil {
		t.Fatal(err)
	}
	var leases []taskpick.LeasedTask
	for len(leases) < n {
		p, err := b.Pick(ctx, pool, taskpick.PickSpec{N: 1, TTL: time.Minute, Digests: []string{"right"}, MaxBytes: taskpick.DefaultMaxAnswerBytes})
		if err != nil || len(p.Tasks) != 1 {
			t.Fatalf("Pick: %+v, %v", p, err)
		}
		leases = append(leases, p.Tasks[0])
	}
	done := make([]int, n)
	var mu sync.Mutex
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, lt := range leases {
		for r := range racers + 1 {
			wg.Go(func() {
				<-start
				digest := "right"
				if r == racers {
					digest = "wrong"
				}
				err := b.Ack(ctx, pool, lt.ID, taskpick.Lease{Token: lt.Token, Digest: digest})
				switch {
				case err == nil && digest == "right":
					mu.Lock()
					done[i]++
					mu.Unlock()
				case err == nil:
					t.Errorf("Ack of %s with a wrong digest succeeded", lt.ID)
				case !errors.Is(err, taskpick.ErrNotFound) && !errors.Is(err, taskpick.ErrStaleLease):
					t.Errorf("Ack of %s: %v", lt.ID, err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for i, d := range done {
		if d != 1 {
			t.Errorf("lease of %s finished by %d Acks, want exactly 1", leases[i].ID, d)
		}
	}
}
