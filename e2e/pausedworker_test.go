package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// pausedTasks is how many task leases the paused worker holds in each pool: one trial each.
const pausedTasks = 10

// pausedWorkerLease is one lease as e2e/testdata/pauseworker reports it.
type pausedWorkerLease struct {
	Backend    string `json:"backend"`
	Pool       string `json:"pool"`
	ID         string `json:"id"`
	Token      uint64 `json:"token"`
	Skewed     bool   `json:"skewed"`
	First      string `json:"first"`
	FirstLost  bool   `json:"firstLost"`
	CtxErr     string `json:"ctxErr"`
	DoneClosed bool   `json:"doneClosed"`
	Err        string `json:"err"`
	LeaseLost  bool   `json:"leaseLost"`
}

// TestPausedWorkerLearnsFirst is TestPausedHolderLearnsFirst for task leases under Work: a
// worker process frozen (SIGSTOP) past the leases of the tasks its handlers run, while a
// rival picks every task again with a higher token, must find each lease lost on its very
// first check after SIGCONT, whichever of the handler context's Err, its Done and Task.Err
// that check is, and ack none of them. The tasks are put at staggered moments so that the
// pause lands in different phases of their extension cycles; half of the pools go through a
// client that reads every expires_at 5s late, as a worker whose clock is 5s behind the
// service's would: the SDK must not care.
func TestPausedWorkerLearnsFirst(t *testing.T) {
	t.Parallel()
	backends := []string{"redis", "mysql", "sqlite"}
	in := startInstance(t, "coord-1", "--nats-url", testenv.NATSURL(), "--mysql-dsn", testenv.MySQLDSN(),
		"--redis-addr", testenv.RedisAddr())
	prefix := testenv.Prefix(t)
	const ttl = 3 * time.Second // as pausedLeaseTTL: room for the renewals before the pause on a loaded host

	proc := startPaused(t, "pauseworker", "-server", in.URL(), "-backends", strings.Join(backends, ","),
		"-prefix", prefix, "-n", fmt.Sprint(pausedTasks), "-ttl", ttl.String(), "-skew", pausedClockSkew.String())

	// The tasks, put one at a time over a third of the ttl in each pool.
	tasks := in.Client().Tasks()
	var wg sync.WaitGroup
	for _, b := range backends {
		for _, skewed := range []bool{false, true} {
			pool := fmt.Sprintf("%s:%s:%v", prefix, b, skewed)
			wg.Go(func() {
				for i := range pausedTasks {
					_, err := tasks.Put(context.Background(), &taskpickv1.PutRequest{Backend: b, Pool: pool,
						Tasks: []*taskpickv1.NewTask{{Id: fmt.Sprintf("t%02d", i)}}})
					if err != nil {
						t.Errorf("put into %s: %v", pool, err)
						return
					}
					time.Sleep(ttl / 3 / pausedTasks)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var held struct{ Held []pausedWorkerLease }
	if err := json.Unmarshal(proc.next("its leases"), &held); err != nil || len(held.Held) != 2*pausedTasks*len(backends) {
		t.Fatalf("pauseworker's leases: %v, %d of %d", err, len(held.Held), 2*pausedTasks*len(backends))
	}
	stoppedAt := proc.stop()

	// A rival picks every task again: each is its own the moment the worker's lease runs out.
	tokens := make(map[string]uint64, len(held.Held))
	var mu sync.Mutex
	for _, b := range backends {
		for _, skewed := range []bool{false, true} {
			pool := fmt.Sprintf("%s:%s:%v", prefix, b, skewed)
			wg.Go(func() {
				var got []*taskpickv1.LeasedTask
				deadline := time.Now().Add(30 * time.Second)
				for len(got) < pausedTasks && time.Now().Before(deadline) {
					res, err := tasks.Pick(context.Background(), &taskpickv1.PickRequest{Backend: b, Pool: pool,
						Count: uint32(pausedTasks - len(got)), Ttl: durationpb.New(30 * time.Second), Wait: durationpb.New(5 * time.Second)})
					if err != nil {
						t.Errorf("rival pick from %s: %v", pool, err)
						return
					}
					got = append(got, res.GetTasks()...)
				}
				if len(got) != pausedTasks {
					t.Errorf("rival picked %d of %d tasks of %s within 30s", len(got), pausedTasks, pool)
				}
				mu.Lock()
				for _, lt := range got {
					tokens[pool+"/"+lt.GetId()] = lt.GetLeaseToken()
				}
				mu.Unlock()
				t.Cleanup(func() {
					for _, lt := range got {
						tasks.Ack(context.Background(), &taskpickv1.AckRequest{Backend: b, Pool: pool, Id: lt.GetId(), //nolint:errcheck // the test is over
							LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()})
					}
				})
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("the rival held every task %v after SIGSTOP", time.Since(stoppedAt).Round(time.Millisecond))
	proc.cont()

	var got struct {
		Checks []pausedWorkerLease
		Pause  string
	}
	if err := json.Unmarshal(proc.next("its checks"), &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("the worker's clock jumped %s across the pause", got.Pause)
	learned := map[string]int{}
	for _, c := range got.Checks {
		name := c.Backend
		if c.Skewed {
			name += fmt.Sprintf("/clock %v behind", pausedClockSkew)
		}
		if tok := tokens[c.Pool+"/"+c.ID]; tok <= c.Token {
			t.Errorf("%s %s: rival's token %d not above the worker's %d", name, c.ID, tok, c.Token)
		}
		switch {
		case !c.FirstLost:
			t.Errorf("%s %s: the first check after the pause (%s) says the lease is held; the rival holds it with token %d > %d",
				name, c.ID, c.First, tokens[c.Pool+"/"+c.ID], c.Token)
		case c.CtxErr == "" || !c.DoneClosed || !c.LeaseLost:
			t.Errorf("%s %s: after the first check: ctx.Err() %q, Done closed %v, Task.Err %q; want all to say lost",
				name, c.ID, c.CtxErr, c.DoneClosed, c.Err)
		default:
			learned[name]++
		}
	}
	for _, b := range backends {
		for _, b := range []string{b, b + fmt.Sprintf("/clock %v behind", pausedClockSkew)} {
			if learned[b] != pausedTasks {
				t.Errorf("%s: the worker learned first in %d of %d trials", b, learned[b], pausedTasks)
			}
		}
	}
	t.Logf("learned first on its first check, per backend: %v", learned)
	if err := proc.wait(30 * time.Second); err != nil {
		t.Errorf("pauseworker: %v (it acks no lost task)", err)
	}
}
