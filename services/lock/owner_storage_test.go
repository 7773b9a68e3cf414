package lock_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// rawStore is a backend store whose storage the test reads directly, as an attacker with a
// copy of the data (a Redis dump, a database backup, a ZooKeeper snapshot) would.
type rawStore struct {
	name string
	fair bool // the backend keeps a line of fair waiters, whose entries name owners
	open func(t *testing.T) (b lock.Backend, dump func(t *testing.T) []byte)
}

var rawStores = []rawStore{
	{"redis", true, func(t *testing.T) (lock.Backend, func(t *testing.T) []byte) {
		rdb := testenv.Redis(t, "")
		prefix := testenv.Prefix(t)
		testenv.CleanRedis(t, rdb, prefix)
		return redislock.New(rdb, redislock.Config{Prefix: prefix}), func(t *testing.T) []byte { return dumpRedis(t, rdb, prefix) }
	}},
	{"redlock", false, func(t *testing.T) (lock.Backend, func(t *testing.T) []byte) {
		prefix := testenv.Prefix(t)
		var nodes []*redis.Client
		for _, addr := range testenv.RedlockAddrs() {
			rdb := testenv.Redis(t, addr)
			testenv.CleanRedis(t, rdb, prefix)
			nodes = append(nodes, rdb)
		}
		return openRedlock(t, testenv.RedlockAddrs(), prefix), func(t *testing.T) []byte {
			var all []byte
			for _, rdb := range nodes {
				all = append(all, dumpRedis(t, rdb, prefix)...)
			}
			return all
		}
	}},
	{"zookeeper", true, func(t *testing.T) (lock.Backend, func(t *testing.T) []byte) {
		root := zkTestRoot(t, testenv.ZooKeeperAddrs())
		return openZK(t, testenv.ZooKeeperAddrs(), zklock.Config{Root: root}), func(t *testing.T) []byte {
			conn, _, err := zk.Connect(testenv.ZooKeeperAddrs(), 5*time.Second, zk.WithLogger(discardZK{}))
			if err != nil {
				t.Fatalf("zookeeper: %v", err)
			}
			defer conn.Close()
			var out bytes.Buffer
			dumpZK(t, conn, root, &out)
			return out.Bytes()
		}
	}},
	{"mysql", true, func(t *testing.T) (lock.Backend, func(t *testing.T) []byte) {
		b := mysqlStore(t)(t)
		db, err := sql.Open("mysql", testenv.MySQLDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return b, func(t *testing.T) []byte { return dumpSQL(t, db) }
	}},
	{"postgres", true, func(t *testing.T) (lock.Backend, func(t *testing.T) []byte) {
		schema := testenv.PostgresSchema(t)
		b := openPostgres(t, testenv.PostgresURL(), sqldb.PostgresConfig{Schema: schema})
		db := postgresRaw(t, schema)
		return b, func(t *testing.T) []byte { return dumpSQL(t, db.DB) }
	}},
	{"sqlite", true, func(t *testing.T) (lock.Backend, func(t *testing.T) []byte) {
		path := filepath.Join(t.TempDir(), "locks.db")
		b, err := sqllock.OpenSQLite(context.Background(), path, sqllock.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		// The files themselves, WAL included: what a copy of the data directory holds.
		return b, func(t *testing.T) []byte {
			var all []byte
			for _, suffix := range []string{"", "-wal", "-shm"} {
				raw, err := os.ReadFile(path + suffix)
				if err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				all = append(all, raw...)
			}
			return all
		}
	}},
}

// TestOwnerNeverStored holds a lock (re-entered and renewed) and queues a waiter behind it,
// then reads every byte each backend stores: neither owner secret appears anywhere, while
// their digests do (so the dump did reach the lease and the line).
func TestOwnerNeverStored(t *testing.T) {
	t.Parallel()
	for _, rs := range rawStores {
		t.Run(rs.name, func(t *testing.T) {
			t.Parallel()
			b, dump := rs.open(t)
			inst := startInstance(t, rs.name, b)
			c := inst.client
			ctx := context.Background()
			const key = "secret-keeping"
			holder, waiter := "holder-"+guessableOwner, "waiter-"+guessableOwner
			must(acquire(ctx, c, key, holder, time.Minute, 0))(t)
			must(acquire(ctx, c, key, holder, time.Minute, 0))(t) // re-entry
			must(c.Locks().Renew(ctx, &lockv1.RenewRequest{Key: key, Owner: holder, Ttl: durationpb.New(time.Minute)}))(t)
			waited := make(chan error, 1)
			go func() {
				_, err := c.Locks().Acquire(ctx, &lockv1.AcquireRequest{
					Key: key, Owner: waiter, Ttl: durationpb.New(time.Minute), Wait: durationpb.New(5 * time.Second), Fair: rs.fair,
				})
				waited <- err
			}()
			// A fair waiter is in line once its digest is stored; a plain waiter keeps nothing
			// in storage, so its dump is read at once.
			raw := dump(t)
			waiterDigest := []byte(digest(waiter))
			for deadline := time.Now().Add(10 * time.Second); rs.fair && !bytes.Contains(raw, waiterDigest) && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				raw = dump(t)
			}
			for _, secret := range []string{holder, waiter, guessableOwner} {
				if i := bytes.Index(raw, []byte(secret)); i >= 0 {
					t.Fatalf("storage holds the owner secret %q at byte %d: %q", secret, i, raw[max(i-40, 0):min(i+len(secret)+40, len(raw))])
				}
			}
			want := []string{holder}
			if rs.fair {
				want = append(want, waiter)
			}
			for _, owner := range want {
				if !bytes.Contains(raw, []byte(digest(owner))) {
					t.Fatalf("storage has no digest of %q: the dump missed the lease or the line (%d bytes read)", owner, len(raw))
				}
			}
			for range 2 {
				must(c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: key, Owner: holder}))(t)
			}
			if err := <-waited; err != nil {
				t.Fatalf("waiter: %v", err)
			}
		})
	}
}

// digest is the owner digest the service hands the backends (see lock.Lease.Owner).
func digest(owner string) string {
	sum := sha256.Sum256([]byte("coordkit-owner:" + owner))
	return hex.EncodeToString(sum[:])
}

// dumpRedis reads every key under prefix, whatever its type, with its value.
func dumpRedis(t *testing.T, rdb *redis.Client, prefix string) []byte {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		var v any
		var err error
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "none":
			continue
		default:
			t.Fatalf("redis key %s has type %s, which the dump does not read", k, typ)
		}
		if err != nil && err != redis.Nil {
			t.Fatalf("read %s: %v", k, err)
		}
		fmt.Fprintf(&out, "%s = %v\n", k, v)
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out.Bytes()
}

// dumpZK appends every node's path and data under path.
func dumpZK(t *testing.T, conn *zk.Conn, path string, out *bytes.Buffer) {
	t.Helper()
	data, _, err := conn.Get(path)
	if err == zk.ErrNoNode {
		return
	}
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	fmt.Fprintf(out, "%s = %s\n", path, data)
	kids, _, err := conn.Children(path)
	if err != nil && err != zk.ErrNoNode {
		t.Fatalf("children of %s: %v", path, err)
	}
	for _, k := range kids {
		dumpZK(t, conn, path+"/"+k, out)
	}
}

// dumpSQL reads every row of the lock tables, every scope's.
func dumpSQL(t *testing.T, db *sql.DB) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, table := range []string{"coordkit_lock_leases", "coordkit_lock_waiters"} {
		rows, err := db.Query("SELECT * FROM " + table)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatalf("scan %s: %v", table, err)
			}
			parts := make([]string, len(vals))
			for i, v := range vals {
				parts[i] = string(v)
			}
			fmt.Fprintf(&out, "%s: %s\n", table, strings.Join(parts, " | "))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		rows.Close()
	}
	return out.Bytes()
}
