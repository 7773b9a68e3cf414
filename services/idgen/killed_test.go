package idgen_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"connectrpc.com/connect"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestNextAnswersUnavailableWhenItsConnectionIsKilled terminates the PostgreSQL backend of
// the reservation a Next waits for (inside its transaction, on the tag's row, which another
// transaction holds): the caller gets unavailable, and the instance then issues the IDs the
// killed reservation would have, once, and goes on above them.
func TestNextAnswersUnavailableWhenItsConnectionIsKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.PostgresSchema(t)
	app := fmt.Sprintf("idgen-next-%x", rand.Uint64())
	u, err := url.Parse(testenv.PostgresURL())
	noErr(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	db, err := sqldb.OpenPostgres(ctx, u.String(), sqldb.PostgresConfig{Schema: schema, MaxConns: 4})
	noErr(t, err)
	t.Cleanup(func() { db.Close() })
	inst := startInstance(t, setup{deps: service.Deps{Postgres: db}})
	_, err = inst.client.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: "t", Step: 100})
	noErr(t, err)

	other, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 2})
	noErr(t, err)
	t.Cleanup(func() { other.Close() })
	blocker, err := other.BeginTx(ctx, nil)
	noErr(t, err)
	defer blocker.Rollback() //nolint:errcheck // rolled back below
	_, err = blocker.ExecContext(ctx, "SELECT max_id FROM coordkit_idgen_segments WHERE biz_tag = 't' FOR UPDATE")
	noErr(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := inst.client.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Tag: "t", Count: 1})
		done <- err
	}()
	killed := 0
	for deadline := time.Now().Add(10 * time.Second); killed == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reservation of the instance waited on the row lock within 10s")
		}
		noErr(t, other.QueryRowContext(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = ? AND wait_event_type = 'Lock'`, app).Scan(&killed))
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waiting 10s after its connection was terminated")
	}
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("Next whose connection was terminated = %v, want unavailable", err)
	}
	noErr(t, blocker.Rollback())

	seen := map[string]bool{}
	for range 5 {
		res, err := inst.client.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Tag: "t", Count: 70})
		noErr(t, err)
		for _, id := range res.GetIds() {
			if seen[id] {
				t.Fatalf("ID %s issued twice", id)
			}
			seen[id] = true
		}
	}
	if !seen["1"] || !seen["350"] {
		t.Fatalf("IDs after the killed reservation do not run from 1 to 350: the killed transaction must have changed nothing")
	}
}
