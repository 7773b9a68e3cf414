package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestRetryRunsDeadlockVictimsAgain makes InnoDB choose a real deadlock victim and checks
// what Retry does with its error: run again while the context lives, up to
// MaxDeadlockRetries times; never for any other error.
func TestRetryRunsDeadlockVictimsAgain(t *testing.T) {
	victim := deadlockVictim(t)
	if !sqldb.MySQL.Deadlock(victim) || sqldb.SQLite.Deadlock(victim) {
		t.Fatalf("Deadlock(%v): mysql %v, sqlite %v", victim, sqldb.MySQL.Deadlock(victim), sqldb.SQLite.Deadlock(victim))
	}
	other := errors.New("not a deadlock")
	for _, c := range []struct {
		name      string
		dialect   sqldb.Dialect
		errs      []error // fn's answers in turn; the last repeats
		cancelAt  int     // the call during which the context ends; 0: never
		wantCalls int
		wantErr   error
	}{
		{"success", sqldb.MySQL, []error{nil}, 0, 1, nil},
		{"victim then success", sqldb.MySQL, []error{victim, victim, nil}, 0, 3, nil},
		{"wrapped victim then success", sqldb.MySQL, []error{fmt.Errorf("tx: %w", victim), nil}, 0, 2, nil},
		{"always a victim", sqldb.MySQL, []error{victim}, 0, sqldb.MaxDeadlockRetries, victim},
		{"another error", sqldb.MySQL, []error{other}, 0, 1, other},
		{"victim as the context ends", sqldb.MySQL, []error{victim}, 1, 1, victim},
		{"victim as the context ends on a later run", sqldb.MySQL, []error{victim}, 2, 2, victim},
		{"sqlite has no victims", sqldb.SQLite, []error{victim, nil}, 0, 1, victim},
		{"a dialect without Deadlock", sqldb.Dialect{Name: "other"}, []error{victim, nil}, 0, 1, victim},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			err := c.dialect.Retry(ctx, func() error {
				calls++
				if calls == c.cancelAt {
					cancel()
				}
				return c.errs[min(calls, len(c.errs))-1]
			})
			if calls != c.wantCalls || !errors.Is(err, c.wantErr) {
				t.Fatalf("%d calls, %v; want %d calls, %v", calls, err, c.wantCalls, c.wantErr)
			}
		})
	}
}

// TestRetryStopsPausingWhenTheContextEnds hands Retry a context that is done, as one that
// ends during the pause before a run again is seen there: it returns at once with the
// victim's error instead of running again.
func TestRetryStopsPausingWhenTheContextEnds(t *testing.T) {
	victim := deadlockVictim(t)
	calls := 0
	err := sqldb.MySQL.Retry(endingDuringPause{context.Background()}, func() error {
		calls++
		return victim
	})
	if calls != 1 || !errors.Is(err, victim) {
		t.Fatalf("%d calls, %v; want 1 call, %v", calls, err, victim)
	}
}

// endingDuringPause is a context whose end Retry sees only while it pauses: Done is
// closed, but Err, which Victim asks first, is still nil.
type endingDuringPause struct{ context.Context }

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (endingDuringPause) Done() <-chan struct{} { return closed }

// deadlockVictim has two transactions lock two rows in opposite orders, and returns the error
// of the one InnoDB rolled back.
func deadlockVictim(t *testing.T) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqldb.OpenMySQL(ctx, testenv.MySQLDSN(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	table := fmt.Sprintf("sqldb_deadlock_%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	// Deferred before the transactions' rollbacks, so it runs after them, and before
	// db.Close, so it runs before that.
	defer db.Exec("DROP TABLE IF EXISTS " + table)
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	update := "UPDATE " + table + " SET v = v + 1 WHERE id = ?"
	var txs [2]*sql.Tx
	for i := range txs {
		if txs[i], err = db.BeginTx(ctx, nil); err != nil {
			t.Fatal(err)
		}
		defer txs[i].Rollback()
		if _, err := txs[i].ExecContext(ctx, update, i+1); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for i, tx := range txs {
		go func() {
			_, err := tx.ExecContext(ctx, update, 2-i) // the row the other one holds
			errs <- err
		}()
	}
	for range txs {
		if err := <-errs; err != nil {
			return err
		}
	}
	t.Fatal("no transaction was chosen as a deadlock victim")
	return nil
}
