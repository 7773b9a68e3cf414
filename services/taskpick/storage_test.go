package taskpick_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/redistask"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// TestLeaseSecretNeverStored picks tasks through the service and reads the raw storage (the
// SQLite file and its WAL; the Redis task hashes): it holds the digests of the lease secrets,
// never a secret.
func TestLeaseSecretNeverStored(t *testing.T) {
	t.Parallel()
	stores := []struct {
		name string
		open func(t *testing.T) (taskpick.Backend, func(t *testing.T) []byte)
	}{
		{"sqlite", func(t *testing.T) (taskpick.Backend, func(*testing.T) []byte) {
			path := filepath.Join(t.TempDir(), "tasks.db")
			b, err := sqltask.OpenSQLite(context.Background(), path, sqltask.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b, func(t *testing.T) []byte {
				var raw []byte
				for _, f := range []string{path, path + "-wal"} {
					data, err := os.ReadFile(f)
					if err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
					raw = append(raw, data...)
				}
				return raw
			}
		}},
		{"postgres", func(t *testing.T) (taskpick.Backend, func(*testing.T) []byte) {
			db, err := sqldb.OpenPostgres(context.Background(), testenv.PostgresURL(), sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t), MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			b, err := sqltask.New(context.Background(), db, sqltask.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b, func(t *testing.T) []byte {
				var raw []byte // every row of the schema's table, every column as text
				if err := db.QueryRowContext(context.Background(), "SELECT string_agg(t::text, E'\\n') FROM coordkit_tasks t").Scan(&raw); err != nil {
					t.Fatal(err)
				}
				return raw
			}
		}},
		{"redis", func(t *testing.T) (taskpick.Backend, func(*testing.T) []byte) {
			prefix := testenv.Prefix(t)
			rdb := testenv.Redis(t, "")
			testenv.CleanRedis(t, rdb, prefix)
			b := redistask.New(rdb, redistask.Config{Prefix: prefix, Scripts: redisconf.Pipelined(rdb)})
			return b, func(t *testing.T) []byte {
				var raw []byte
				keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					if v, err := rdb.HGetAll(context.Background(), k).Result(); err == nil {
						for f, x := range v {
							raw = append(raw, f+"="+x+"\n"...)
						}
					}
				}
				return raw
			}
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b, dump := st.open(t)
			in := startInstance(t, st.name, b, nil)
			p := pool(t, "stored")
			put(t, in, p, task("a"), task("b"), task("c"))
			picked := pick(t, in, &taskpickv1.PickRequest{Pool: p, Count: 3})
			if len(picked) != 3 {
				t.Fatalf("picked %d", len(picked))
			}
			if _, err := in.client.Extend(ctx, &taskpickv1.ExtendRequest{Pool: p, Id: "a", LeaseToken: picked[0].GetLeaseToken(), LeaseSecret: picked[0].GetLeaseSecret()}); err != nil {
				t.Fatal(err)
			}
			raw := dump(t)
			for _, lt := range picked {
				if i := bytes.Index(raw, []byte(lt.GetLeaseSecret())); i >= 0 {
					t.Fatalf("storage holds the lease secret of %s at byte %d", lt.GetId(), i)
				}
				if !bytes.Contains(raw, []byte(taskpick.LeaseDigest(lt.GetLeaseSecret()))) {
					t.Fatalf("storage has no digest of %s's secret: the dump missed it (%d bytes read)", lt.GetId(), len(raw))
				}
			}
		})
	}
}
