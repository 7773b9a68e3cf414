package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
)

// TestPostgresSilentInstanceFreesTheKey stalls the network of an instance in the middle of
// an acquire's transaction (after it inserted the new key's row, while it waited on the
// fence floor the test held), as a partition or a host that lost power does: the server
// sees an open connection idle in a transaction, and until TCP keepalive notices (two hours
// by default) its row locks would stay. Another instance must get the key once the silent
// one's session has been idle in its transaction for its statement timeout.
func TestPostgresSilentInstanceFreesTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	raw := postgresRaw(t, schema)
	p := testenv.NewProxy(t, postgresAddr(t))
	silent := openPostgres(t, postgresURLVia(t, p.Addr()), sqldb.PostgresConfig{Schema: schema, StatementTimeout: 3 * time.Second})
	other := openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, StatementTimeout: time.Second})
	t.Cleanup(p.Cut) // before the silent backend closes: its stalled calls end

	floors, pid := lockingTx(t, raw, "SELECT fence_floor FROM coordkit_lock_fences")
	stuck := make(chan error, 1)
	go func() {
		_, err := silent.TryAcquire(ctx, "stock", "owner-silent", time.Minute)
		stuck <- err
	}()
	blockedBy(t, raw, pid)
	p.StallOpen()
	if err := floors.Rollback(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	for {
		att, err := other.TryAcquire(ctx, "stock", "owner-other", time.Minute)
		if err == nil && att.Acquired {
			break
		}
		if err == nil && !att.Acquired {
			t.Fatalf("the silent instance's acquire, never committed, holds the key: %+v", att.Holder)
		}
		if !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("TryAcquire = %v, want unavailable while the silent transaction holds the row", err)
		}
		if waited := time.Since(start); waited > 30*time.Second {
			t.Fatalf("the key is still blocked %v after the instance inside its transaction went silent: %v", waited.Round(time.Second), err)
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the key was blocked %v by a silent transaction, want about its statement timeout (3s)", took)
	}
	select {
	case err := <-stuck:
		t.Logf("the silent acquire answered %v", err)
	default:
	}
}
