package lock_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/redislock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// serveLock runs a lock service built from cfg (its Registerer is the server's) through the
// real bootstrap, for tests that need a setting startInstance leaves at its default.
func serveLock(t *testing.T, cfg lock.Config) *instance {
	t.Helper()
	srv := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cfg.Registerer = srv.Registry()
	svc, err := lock.NewService(cfg)
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	srv.Handle(lockv1connect.NewLockServiceHandler(svc, srv.HandlerOptions()...))
	url, stop := testenv.Serve(t, srv)
	return &instance{url: url, client: client.New(url), stop: stop, svc: svc}
}

// metricValue reads the sample of series (name and labels as /metrics prints them, e.g.
// `coordkit_lock_wait_retries_total{backend="redis"}`) from the instance at url; 0 when the
// series does not exist yet.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// cutCase is a backend whose store a test can cut off from one service instance while
// another instance keeps reaching it directly.
type cutCase struct {
	name string
	// open makes a fresh isolated store and returns a backend that reaches it through the
	// returned proxies, and one that reaches it directly.
	open func(t *testing.T) (proxied, direct lock.Backend, proxies []*testenv.Proxy)
}

// cutCases are every backend whose store is behind a network: all but SQLite.
var cutCases = []cutCase{
	{name: "redis", open: func(t *testing.T) (lock.Backend, lock.Backend, []*testenv.Proxy) {
		prefix := testenv.Prefix(t)
		testenv.CleanRedis(t, testenv.Redis(t, ""), prefix)
		p := testenv.NewProxy(t, testenv.RedisAddr())
		return redislock.New(testenv.Redis(t, p.Addr()), redislock.Config{Prefix: prefix}), redislock.New(testenv.Redis(t, ""), redislock.Config{Prefix: prefix}), []*testenv.Proxy{p}
	}},
	{name: "redlock", open: func(t *testing.T) (lock.Backend, lock.Backend, []*testenv.Proxy) {
		prefix := testenv.Prefix(t)
		var proxies []*testenv.Proxy
		var addrs []string
		for _, addr := range testenv.RedlockAddrs() {
			testenv.CleanRedis(t, testenv.Redis(t, addr), prefix)
			p := testenv.NewProxy(t, addr)
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		return openRedlock(t, addrs, prefix), openRedlock(t, testenv.RedlockAddrs(), prefix), proxies
	}},
	{name: "zookeeper", open: func(t *testing.T) (lock.Backend, lock.Backend, []*testenv.Proxy) {
		root := zkTestRoot(t, testenv.ZooKeeperAddrs())
		p := testenv.NewProxy(t, testenv.ZooKeeperAddrs()[0])
		// A session that outlives the cut: the outage is a blip, not a lost session.
		proxied := openZK(t, []string{p.Addr()}, zklock.Config{Root: root, SessionTimeout: 20 * time.Second})
		return proxied, openZK(t, testenv.ZooKeeperAddrs(), zklock.Config{Root: root}), []*testenv.Proxy{p}
	}},
	{name: "mysql", open: func(t *testing.T) (lock.Backend, lock.Backend, []*testenv.Proxy) {
		scope := testenv.Prefix(t)
		if len(scope) > 64 {
			scope = scope[len(scope)-64:]
		}
		t.Cleanup(func() {
			if db, err := sql.Open("mysql", testenv.MySQLDSN()); err == nil {
				sqllock.DropScope(context.Background(), db, scope) //nolint:errcheck // best effort
				db.Close()
			}
		})
		cfg, err := mysql.ParseDSN(testenv.MySQLDSN())
		if err != nil {
			t.Fatal(err)
		}
		p := testenv.NewProxy(t, cfg.Addr)
		direct := testenv.MySQLDSN()
		cfg.Addr = p.Addr()
		var backends [2]lock.Backend
		for i, dsn := range []string{cfg.FormatDSN(), direct} {
			b, err := sqllock.OpenMySQL(context.Background(), dsn, sqllock.Config{Scope: scope})
			if err != nil {
				t.Fatalf("open mysql at %s: %v", dsn, err)
			}
			t.Cleanup(func() { b.Close() })
			backends[i] = b
		}
		return backends[0], backends[1], []*testenv.Proxy{p}
	}},
	{name: "postgres", open: func(t *testing.T) (lock.Backend, lock.Backend, []*testenv.Proxy) {
		pg := sqldb.PostgresConfig{Schema: testenv.PostgresSchema(t)}
		p := testenv.NewProxy(t, postgresAddr(t))
		return openPostgres(t, postgresURLVia(t, p.Addr()), pg), openPostgres(t, testenv.PostgresURL(), pg), []*testenv.Proxy{p}
	}},
}
