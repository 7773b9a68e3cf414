// Command worker is a task-pick worker process for the A/B task-grab scenario: it runs the
// SDK's Work loop on one coord instance and "does" each task by recording it in MariaDB with
// a write its lease token guards, then lets Work ack it. On SIGTERM it stops, prints its
// counts as one JSON line and exits 0.
//
// Every handler first records the attempt (task, token, worker, when it began, and the
// expiry its lease was picked with: the service promised the lease at least until then, so
// no other lease of the task may begin before it). With -hang-after N, the
// handlers after the first N record their attempt and then hang, holding their leases (the
// SDK keeps extending them), until the process is killed: a worker that dies mid-task.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/sqldb"
)

type config struct {
	name, server, backend, pool, dsn string
	fence, done, attempts            string
	ttl, work                        time.Duration
	concurrency, hangAfter           int
}

// counts are what the handler saw, besides the SDK's WorkStats.
type counts struct {
	handled, refused, alreadyDone atomic.Int64
}

func main() {
	var cfg config
	flag.StringVar(&cfg.name, "name", "", "worker name recorded with each attempt")
	flag.StringVar(&cfg.server, "server", "", "coord base URL")
	flag.StringVar(&cfg.backend, "backend", "", "task backend")
	flag.StringVar(&cfg.pool, "pool", "", "task pool")
	flag.StringVar(&cfg.dsn, "dsn", "", "MariaDB DSN")
	flag.StringVar(&cfg.fence, "fence", "", "table (task_id, token): the highest token that wrote each task")
	flag.StringVar(&cfg.done, "done", "", "table (task_id unique, token, worker): tasks done")
	flag.StringVar(&cfg.attempts, "attempts", "", "table (task_id, token, worker): every handler run")
	flag.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "lease of each task")
	flag.DurationVar(&cfg.work, "work", 5*time.Millisecond, "how long one task's work takes")
	flag.IntVar(&cfg.concurrency, "concurrency", 4, "handlers at once")
	flag.IntVar(&cfg.hangAfter, "hang-after", 0, "hang every handler after this many (0: never)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := sqldb.OpenMySQL(ctx, cfg.dsn, cfg.concurrency+2)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	var stats client.WorkStats
	var n counts
	err = client.New(cfg.server).Work(ctx, cfg.pool, func(ctx context.Context, t *client.Task) error {
		return handle(ctx, db.DB, cfg, &n, t)
	}, client.WithTaskBackend(cfg.backend), client.WithConcurrency(cfg.concurrency), client.WithBatch(cfg.concurrency),
		client.WithLeaseTTL(cfg.ttl), client.WithPollWait(2*time.Second), client.WithOrder(taskpickv1.Order_ORDER_RANDOM),
		client.WithWorkStats(&stats))
	if err != nil {
		log.Fatal(err)
	}
	out, _ := json.Marshal(map[string]uint64{
		"picked": stats.Picked.Load(), "acked": stats.Acked.Load(), "nacked": stats.Nacked.Load(),
		"dead": stats.Dead.Load(), "leases_lost": stats.LeasesLost.Load(), "finish_errors": stats.FinishErrors.Load(),
		"refused": uint64(n.refused.Load()), "already_done": uint64(n.alreadyDone.Load()),
	})
	fmt.Println(string(out))
}

// handle does one task: records the attempt, works, and records the task as done unless a
// later lease of it has written (then this lease is stale: an error, and Work's Nack is
// refused too). A task already done by an earlier lease that never got its Ack through is
// done: it is acked again without a second record.
func handle(ctx context.Context, db *sql.DB, cfg config, n *counts, t *client.Task) error {
	err := do(ctx, db, cfg, n, t)
	if err != nil && !errors.Is(err, errRefused) {
		// Work nacks the task, which may be picked again before this lease's first expiry:
		// mark the attempt given back, so that the test does not take that for two holders.
		db.ExecContext(context.WithoutCancel(ctx), "UPDATE "+cfg.attempts+" SET gave_back = 1 WHERE task_id = ? AND token = ?", t.ID, t.LeaseToken) //nolint:errcheck // best effort
	}
	return err
}

// errRefused is a guarded write refused because a later lease of the task has written.
var errRefused = errors.New("refused: a later lease has written")

// do is handle's work.
func do(ctx context.Context, db *sql.DB, cfg config, n *counts, t *client.Task) error {
	// Read before the insert: the lease's first expiry (extensions only move it later) and a
	// moment at or after its pick.
	began, expires := time.Now().UnixMicro(), t.ExpiresAt().UnixMicro()
	if _, err := db.ExecContext(ctx, "INSERT INTO "+cfg.attempts+" (task_id, token, worker, began_us, expires_us) VALUES (?, ?, ?, ?, ?)",
		t.ID, t.LeaseToken, cfg.name, began, expires); err != nil {
		return err
	}
	if h := n.handled.Add(1); cfg.hangAfter > 0 && h > int64(cfg.hangAfter) {
		<-ctx.Done() // hung mid-task, lease kept alive, until killed
		return context.Cause(ctx)
	}
	time.Sleep(cfg.work)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	res, err := tx.ExecContext(ctx, "UPDATE "+cfg.fence+" SET token = ? WHERE task_id = ? AND token < ?", t.LeaseToken, t.ID, t.LeaseToken)
	if err != nil {
		return err
	}
	if rows, err := res.RowsAffected(); err != nil || rows == 0 {
		n.refused.Add(1)
		return fmt.Errorf("task %s: token %d %w (%v)", t.ID, t.LeaseToken, errRefused, err)
	}
	res, err = tx.ExecContext(ctx, "INSERT IGNORE INTO "+cfg.done+" (task_id, token, worker) VALUES (?, ?, ?)", t.ID, t.LeaseToken, cfg.name)
	if err != nil {
		return err
	}
	if rows, err := res.RowsAffected(); err != nil || rows == 0 {
		n.alreadyDone.Add(1)
	}
	return tx.Commit()
}
