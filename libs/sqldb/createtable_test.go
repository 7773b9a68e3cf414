package sqldb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// TestCreateTableConcurrently runs one CREATE TABLE IF NOT EXISTS from several connections
// at once, as instances starting together do, many times over: on PostgreSQL some of them
// fail on the catalog's unique index, and CreateTable must still answer nil to every one.
func TestCreateTableConcurrently(t *testing.T) {
	t.Parallel()
	db := openPostgres(t, sqldb.PostgresConfig{})
	ctx := context.Background()
	const rounds, racers = 20, 4
	for r := range rounds {
		table := fmt.Sprintf("race_%d", r)
		ddl := "CREATE TABLE IF NOT EXISTS " + table + " (k " + db.Dialect.Key + " PRIMARY KEY, n " + db.Dialect.Int64 + ")"
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() { errs[i] = db.CreateTable(ctx, table, ddl) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, creator %d: CreateTable = %v, want nil (the table exists)", r, i, err)
			}
		}
	}
}
