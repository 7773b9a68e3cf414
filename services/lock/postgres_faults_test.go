package lock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// lockingTx begins a transaction on raw that locks the rows q selects (FOR UPDATE) and
// returns it with its server process id; the test ends it.
func lockingTx(t *testing.T, raw *sqldb.DB, q string, args ...any) (*sql.Tx, int) {
	t.Helper()
	tx, err := raw.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() }) //nolint:errcheck // ended by the test, or here
	var pid int
	if err := tx.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(q+" FOR UPDATE", args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// blockedBy waits until a server process waits on a lock that process pid holds and
// returns its id.
func blockedBy(t *testing.T, raw *sqldb.DB, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		var waiter int
		err := raw.QueryRow("SELECT pid FROM pg_stat_activity WHERE ?::int = ANY(pg_blocking_pids(pid))", pid).Scan(&waiter)
		if err == nil {
			return waiter
		}
		if err != sql.ErrNoRows {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement of the service waited on the test's row locks within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPostgresConnectionKilledMidTransaction kills the server process of an acquire's
// transaction while it holds its new key's row and waits on the fence floor the test
// holds: the acquire answers unavailable, the row it inserted is gone with its
// transaction, and afterwards the key has one holder at a time with rising tokens.
func TestPostgresConnectionKilledMidTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	raw := postgresRaw(t, schema)
	inst := startInstance(t, "postgres", openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema}))

	floors, pid := lockingTx(t, raw, "SELECT fence_floor FROM coordkit_lock_fences")
	got := make(chan error, 1)
	go func() {
		_, err := acquire(ctx, inst.client, "stock", "owner-a-0123456789abcdef", time.Minute, 0)
		got <- err
	}()
	victim := blockedBy(t, raw, pid)
	var holdsRow bool
	if err := raw.QueryRow("SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"+
		" WHERE l.pid = ? AND c.relname = 'coordkit_lock_leases' AND l.granted AND l.mode = 'RowExclusiveLock')", victim).Scan(&holdsRow); err != nil {
		t.Fatal(err)
	}
	if !holdsRow {
		t.Fatalf("process %d waits on the floors without having written the key's row", victim)
	}
	if _, err := raw.Exec("SELECT pg_terminate_backend(?::int)", victim); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		wantCode(t, err, connect.CodeUnavailable)
	case <-time.After(20 * time.Second):
		t.Fatal("the acquire whose connection was killed did not answer within 20s")
	}
	if err := floors.Rollback(); err != nil {
		t.Fatal(err)
	}
	if st := inspect(t, inst.client, "stock"); st.GetHeld() {
		t.Fatalf("after the killed acquire the lock is %v, want free", st)
	}
	var last uint64
	for _, owner := range []string{"owner-b-0123456789abcdef", "owner-a-0123456789abcdef"} {
		res := must(acquire(ctx, inst.client, "stock", owner, time.Minute, 0))(t)
		if !res.GetAcquired() || res.GetLease().GetFencingToken() <= last {
			t.Fatalf("acquire by %s: %v; want acquired with a token above %d", owner, res, last)
		}
		last = res.GetLease().GetFencingToken()
		other := must(acquire(ctx, inst.client, "stock", "rival-0123456789abcdef", time.Minute, 0))(t)
		if other.GetAcquired() {
			t.Fatalf("a rival acquired the lock %s holds: %v", owner, other)
		}
		must(inst.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "stock", Owner: owner}))(t)
	}
}

// TestPostgresStatementTimeout holds a lease's row locked from outside while its owner
// renews it, on a backend whose statements time out after a second: the renewal answers
// unavailable within the timeout instead of hanging, a rival still finds the lock held
// (a plain read, which no row lock blocks), and once the row is free again the owner
// renews and releases, and the next holder's token is higher.
func TestPostgresStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	raw := postgresRaw(t, schema)
	const timeout = time.Second
	inst := startInstance(t, "postgres", openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, StatementTimeout: timeout}))

	const owner, rival = "owner-a-0123456789abcdef", "rival-0123456789abcdef"
	first := must(acquire(ctx, inst.client, "stock", owner, time.Minute, 0))(t)
	row, _ := lockingTx(t, raw, "SELECT owner FROM coordkit_lock_leases WHERE lock_key = ?", "stock")
	renew := func() (*lockv1.RenewResponse, error) {
		return inst.client.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "stock", Owner: owner, Ttl: durationpb.New(time.Minute)})
	}
	start := time.Now()
	_, err := renew()
	wantCode(t, err, connect.CodeUnavailable)
	if took := time.Since(start); took < timeout || took > timeout+10*time.Second {
		t.Errorf("the renewal of a row locked from outside answered after %v, want the statement timeout (%v)", took, timeout)
	}
	if res := must(acquire(ctx, inst.client, "stock", rival, time.Minute, 0))(t); res.GetAcquired() {
		t.Fatalf("a rival acquired the lock while its owner's renewal timed out: %v", res)
	}
	if err := row.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res, err := renew(); err != nil || res.GetLease().GetFencingToken() != first.GetLease().GetFencingToken() {
		t.Fatalf("renewal once the row is free: %v, %v; want the lease of token %d", res, err, first.GetLease().GetFencingToken())
	}
	must(inst.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "stock", Owner: owner}))(t)
	next := must(acquire(ctx, inst.client, "stock", rival, time.Minute, 0))(t)
	if !next.GetAcquired() || next.GetLease().GetFencingToken() <= first.GetLease().GetFencingToken() {
		t.Fatalf("next holder: %v; want acquired with a token above %d", next, first.GetLease().GetFencingToken())
	}
}

// TestPostgresBatchKilledMidChunk kills the server process of a batch's transaction while it
// has written the rows of its three new keys and waits on the fence floors the test holds:
// every acquire of the batch answers unavailable, none of the three is left held (no half of
// the batch applied), and the batch sent again takes all three.
func TestPostgresBatchKilledMidChunk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	raw := postgresRaw(t, schema)
	inst := startInstance(t, "postgres", openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema}))
	locks := client.New(inst.url, client.WithBatching(0)).Locks()
	const owner = "owner-a-0123456789abcdef"
	keys := []string{"a", "b", "c"}
	var ops []*lockv1.BatchOperation
	for _, k := range keys {
		ops = append(ops, acquireOp(&lockv1.AcquireRequest{Key: k, Owner: owner, Ttl: durationpb.New(time.Minute)}))
	}

	floors, pid := lockingTx(t, raw, "SELECT fence_floor FROM coordkit_lock_fences")
	got := make(chan *lockv1.BatchResponse, 1)
	go func() {
		res, err := locks.Batch(ctx, &lockv1.BatchRequest{Operations: ops})
		if err != nil {
			t.Errorf("Batch: %v", err)
		}
		got <- res
	}()
	victim := blockedBy(t, raw, pid)
	if _, err := raw.Exec("SELECT pg_terminate_backend(?::int)", victim); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		for i, r := range res.GetResults() {
			if r.GetError().GetCode() != connect.CodeUnavailable.String() {
				t.Errorf("acquire of %q in the killed batch: %v, want unavailable", keys[i], r)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the batch whose connection was killed did not answer within 20s")
	}
	if err := floors.Rollback(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if st := inspect(t, inst.client, k); st.GetHeld() {
			t.Fatalf("after the killed batch %q is %v, want free", k, st)
		}
	}
	res := must(locks.Batch(ctx, &lockv1.BatchRequest{Operations: ops}))(t)
	for i, r := range res.GetResults() {
		if !r.GetAcquire().GetAcquired() {
			t.Fatalf("acquire of %q sent again: %v, want acquired", keys[i], r)
		}
	}
}

// TestPostgresBatchDeadlockVictimRunsAgain makes a batch's transaction a deadlock victim:
// it holds its new keys' rows and waits on the fence floors the test holds, while the test
// then waits on one of those rows. PostgreSQL aborts one of the two; the batch runs again
// once the test's transaction ended, and every acquire answers acquired, exactly once.
func TestPostgresBatchDeadlockVictimRunsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	raw := postgresRaw(t, schema)
	inst := startInstance(t, "postgres", openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema}))
	locks := client.New(inst.url, client.WithBatching(0)).Locks()
	const owner = "owner-a-0123456789abcdef"
	keys := []string{"a", "b", "c"}
	var ops []*lockv1.BatchOperation
	for _, k := range keys {
		ops = append(ops, acquireOp(&lockv1.AcquireRequest{Key: k, Owner: owner, Ttl: durationpb.New(time.Minute)}))
	}

	// Key "a" gets a row of its own, free again, that the batch locks and the test then wants.
	must(acquire(ctx, inst.client, "a", "rival-0123456789abcdef", time.Minute, 0))(t)
	must(inst.client.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "a", Owner: "rival-0123456789abcdef"}))(t)
	floors, pid := lockingTx(t, raw, "SELECT fence_floor FROM coordkit_lock_fences")
	got := make(chan *lockv1.BatchResponse, 1)
	go func() {
		res, err := locks.Batch(ctx, &lockv1.BatchRequest{Operations: ops})
		if err != nil {
			t.Errorf("Batch: %v", err)
		}
		got <- res
	}()
	blockedBy(t, raw, pid)
	// The cycle: the test now waits on row "a", which the batch holds. Whichever of the two
	// PostgreSQL aborts, the test's transaction ends here.
	rows, err := floors.Query("SELECT owner FROM coordkit_lock_leases WHERE lock_key = ? FOR UPDATE", "a")
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
	}
	floors.Rollback() //nolint:errcheck // aborted or not, it ends
	select {
	case res := <-got:
		for i, r := range res.GetResults() {
			if !r.GetAcquire().GetAcquired() {
				t.Errorf("acquire of %q in the deadlocked batch: %v, want acquired", keys[i], r)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deadlocked batch did not answer within 30s")
	}
	for _, k := range keys {
		if st := inspect(t, inst.client, k); !st.GetHeld() || st.GetHoldCount() != 1 {
			t.Fatalf("after the batch %q is %v, want held once", k, st)
		}
	}
}
