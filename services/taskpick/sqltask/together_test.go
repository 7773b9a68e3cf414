package sqltask_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestNewTogetherOnPostgres starts several backends at the same moment on one fresh
// PostgreSQL schema, as a deployment's pods do, each on a pool of its own: every one opens.
// PostgreSQL lets concurrent CREATE TABLE (or INDEX) IF NOT EXISTS of one name all find it
// missing, and the losers fail on the catalog's unique index.
func TestNewTogetherOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for round := range 4 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			schema := testenv.PostgresSchema(t)
			const instances = 4
			dbs := make([]*sqldb.DB, instances)
			for i := range dbs {
				db, err := sqldb.OpenPostgres(ctx, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 2})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				dbs[i] = db
			}
			errs := make([]error, instances)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, db := range dbs {
				wg.Go(func() {
					<-start
					b, err := sqltask.New(ctx, db, sqltask.Config{})
					if err == nil {
						b.Close()
					}
					errs[i] = err
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("instance %d: New = %v", i, err)
				}
			}
		})
	}
}
