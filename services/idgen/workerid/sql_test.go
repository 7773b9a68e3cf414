package workerid_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen/workerid"
)

// sqlEngines are the databases the SQL store runs on. Each returns a function that opens
// one more handle on one database of the test's own (MySQL: the shared test database), as
// one more instance would.
var sqlEngines = []struct {
	name string
	open func(t *testing.T) func() *sqldb.DB
}{
	{"mysql", func(t *testing.T) func() *sqldb.DB {
		return func() *sqldb.DB {
			db, err := sqldb.OpenMySQL(context.Background(), testenv.MySQLDSN(), 4)
			noErr(t, err)
			t.Cleanup(func() { db.Close() })
			return db
		}
	}},
	{"sqlite", func(t *testing.T) func() *sqldb.DB {
		path := filepath.Join(t.TempDir(), "ids.db")
		return func() *sqldb.DB {
			db, err := sqldb.OpenSQLite(context.Background(), path)
			noErr(t, err)
			t.Cleanup(func() { db.Close() })
			return db
		}
	}},
	{"postgres", func(t *testing.T) func() *sqldb.DB {
		schema := testenv.PostgresSchema(t)
		return func() *sqldb.DB {
			db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema, MaxConns: 4})
			noErr(t, err)
			t.Cleanup(func() { db.Close() })
			return db
		}
	}},
}

// TestSQLInstancesStartAndLeaseAtOnce starts several instances at the same moment on one
// fresh database, each creating the table and taking leases at once: every start succeeds
// (PostgreSQL's CREATE TABLE IF NOT EXISTS is not atomic), no id is leased twice, and an id
// released with its last millisecond is leased again with it.
func TestSQLInstancesStartAndLeaseAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, e := range sqlEngines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			open := e.open(t)
			const instances, leasesEach = 6, 4
			handles := make([]*sqldb.DB, instances)
			for i := range handles {
				handles[i] = open()
			}
			prefix := testenv.Prefix(t)
			var (
				mu     sync.Mutex
				holder = map[int]string{}
				wg     sync.WaitGroup
			)
			stores := make([]*workerid.SQL, instances)
			for i, db := range handles {
				wg.Go(func() {
					s, err := workerid.NewSQL(ctx, db)
					if err != nil {
						t.Errorf("instance %d: NewSQL: %v", i, err)
						return
					}
					stores[i] = s
					for j := range leasesEach {
						owner := fmt.Sprintf("%s-%d-%d", prefix, i, j)
						l, err := s.Acquire(ctx, owner, time.Minute)
						if err != nil {
							t.Errorf("instance %d: Acquire: %v", i, err)
							return
						}
						t.Cleanup(func() { s.Release(context.Background(), l.ID, owner, 0) })
						mu.Lock()
						if prev, taken := holder[l.ID]; taken {
							t.Errorf("worker id %d leased to %s and %s at once", l.ID, prev, owner)
						}
						holder[l.ID] = owner
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if len(holder) != instances*leasesEach {
				t.Fatalf("%d ids leased, want %d", len(holder), instances*leasesEach)
			}

			// A released id keeps the last millisecond its holder recorded for the next one.
			var id int
			var owner string
			for id, owner = range holder {
				break
			}
			noErr(t, stores[0].Release(ctx, id, owner, 1234))
			again, err := stores[1].Acquire(ctx, prefix+"-again", time.Minute)
			noErr(t, err)
			t.Cleanup(func() { stores[1].Release(context.Background(), again.ID, again.Owner, 0) })
			if e.name != "mysql" && (again.ID != id || again.LastMillis != 1234) {
				t.Fatalf("Acquire after Release = %+v, want id %d with last millisecond 1234", again, id)
			}
		})
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
