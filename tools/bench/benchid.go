package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	bwsnowflake "github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/coordkit/coordkit/libs/client"
	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/idgen"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/idgenservice"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/uuidgen"
)

// benchIDConfig is everything `coordbench id` can be told.
type benchIDConfig struct {
	clients   int
	batch     int
	duration  time.Duration
	warmup    time.Duration
	serverURL string
	redisAddr string
	// mysqlDSN and postgresURL are the databases of the store rows; empty skips them.
	mysqlDSN    string
	postgresURL string
	asJSON      bool
	// sqliteSync is how the in-process SQLite stores sync commits (--sqlite-synchronous).
	sqliteSync sqldb.Synchronous
}

// genResult is one in-process generator measured with testing.Benchmark, or the SDK's Next
// from one goroutine (sdk/…), which also has its calls timed one by one.
type genResult struct {
	Target  string  `json:"target"`
	NsPerOp float64 `json:"ns_per_op"`
	Allocs  int64   `json:"allocs_per_op"`
	// The SDK rows only: of TimedCalls Next calls timed one by one, SlowCalls took longer
	// than sdkSlowCall (they waited for a fetch), the longest MaxCall.
	TimedCalls int           `json:"timed_calls,omitempty"`
	SlowCalls  int           `json:"slow_calls,omitempty"`
	MaxCall    time.Duration `json:"max_call_ns,omitempty"`
}

// sdkSlowCall is how long a Next from the SDK's buffer may take before it counts as one
// that waited for the service.
const sdkSlowCall = 100 * time.Microsecond

// genPeers pairs each coordkit generator with the peer it is compared to: same work, same
// output type.
var genPeers = [][2]string{
	{"coordkit/snowflake", "bwmarrin/snowflake"},
	{"coordkit/uuid-v7 (string)", "google/uuid v7 (string)"},
	{"coordkit/uuid-v4 (string)", "google/uuid v4 (string)"},
}

// idRunResult is one service run: calls of count IDs from clients goroutines.
type idRunResult struct {
	runResult
	Count     int     `json:"count"`
	IDsPerSec float64 `json:"ids_per_sec"`
}

// benchIDFlags adds the flags of `coordbench id` to fs and returns the config they fill.
func benchIDFlags(fs *pflag.FlagSet) *benchIDConfig {
	var cfg benchIDConfig
	fs.IntVar(&cfg.clients, "clients", 16, "concurrent clients of each service run")
	fs.IntVar(&cfg.batch, "batch", 1000, "IDs per call of the batch runs (1 to 10000)")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "measured length of each service run")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each service run")
	fs.StringVar(&cfg.serverURL, "server", "", "base URL of a running coordkit service; empty starts one in-process")
	fs.StringVar(&cfg.redisAddr, "redis-addr", "127.0.0.1:6379", "Redis of the in-process service's redis-incr mode; empty skips that mode")
	fs.StringVar(&cfg.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/coordkit", "MySQL/MariaDB of the store rows (the segment mode through a service on it, and bare reservations; in-process, so not with --server); empty skips them")
	fs.StringVar(&cfg.postgresURL, "postgres-url", "postgres://postgres@127.0.0.1:5432/coordkit?sslmode=disable&options=-c%20synchronous_commit%3Don", "PostgreSQL of the store rows (the segment mode through a service on it, and bare reservations, in its schema coordkit; in-process, so not with --server); empty skips them")
	fs.BoolVar(&cfg.asJSON, "json", false, "print the results as JSON instead of tables")
	return &cfg
}

// benchID implements `coordbench id`: ns/op of the in-process generators next to
// bwmarrin/snowflake and google/uuid, then IDs/s and latency through the service for single
// IDs and batches, per mode.
func benchID(ctx context.Context, cfg benchIDConfig, stdout, stderr io.Writer) error {
	r, err := measureID(ctx, cfg, stderr)
	if r.gens == nil && err != nil {
		return err
	}
	if werr := writeIDReport(stdout, r.gens, r.sw, r.runs, cfg.asJSON); werr != nil {
		return errors.Join(werr, err)
	}
	return err
}

// idMeasured is everything `coordbench id` measured.
type idMeasured struct {
	gens []genResult
	sw   switchResult
	runs []idRunResult
}

// measureID runs the generators, the segment switch and the service runs; gens is nil when
// nothing could be measured, and the service runs are those that completed.
func measureID(ctx context.Context, cfg benchIDConfig, stderr io.Writer) (idMeasured, error) {
	if cfg.clients < 1 || cfg.batch < 1 || cfg.batch > idgen.MaxCount || cfg.duration <= 0 {
		return idMeasured{}, fmt.Errorf("bench: --clients and --duration must be positive and --batch within [1, %d]", idgen.MaxCount)
	}
	gens, err := benchGenerators(ctx, cfg.sqliteSync)
	if err != nil {
		return idMeasured{}, err
	}
	sw, err := benchSegmentSwitch(ctx, cfg.sqliteSync)
	if err != nil {
		return idMeasured{}, err
	}
	url, modes, stop, err := openIDService(ctx, cfg, nil)
	if err != nil {
		return idMeasured{}, err
	}
	runs, sdk, runErr := runIDService(ctx, cfg, url, modes, stderr)
	m := idMeasured{append(gens, sdk...), sw, runs}
	if err := errors.Join(runErr, stop()); err != nil || cfg.serverURL != "" {
		return m, err
	}
	storeRuns, err := runIDStores(ctx, cfg, stderr)
	m.runs = append(m.runs, storeRuns...)
	return m, err
}

// benchGenerators measures each in-process generator for about a second, genRounds times.
func benchGenerators(ctx context.Context, syncMode sqldb.Synchronous) ([]genResult, error) {
	dir, err := os.MkdirTemp("", "coord-bench-id-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	db, err := sqldb.OpenSQLite(ctx, filepath.Join(dir, "ids.db"), sqldb.WithSynchronous(syncMode))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	store, err := segment.NewStore(ctx, db)
	if err != nil {
		return nil, err
	}
	seg := segment.New(store, segment.Config{Logger: slog.New(slog.DiscardHandler)})
	defer seg.Close()
	if _, err := seg.CreateTag(ctx, "bench", 1, 1000, ""); err != nil {
		return nil, err
	}
	worker := 1
	sf, err := snowflake.Start(ctx, snowflake.Config{WorkerID: &worker})
	if err != nil {
		return nil, err
	}
	node, err := bwsnowflake.NewNode(1)
	if err != nil {
		return nil, fmt.Errorf("bench: bwmarrin/snowflake: %w", err)
	}
	var firstErr error
	var once sync.Once
	check := func(err error) {
		if err != nil {
			once.Do(func() { firstErr = err })
		}
	}
	uuids := uuidgen.New(nil)
	segIDs := make([]block.Range, 0, 4)
	sfIDs := make([]snowflake.Range, 0, 4)
	// The coordkit rows measure the engines' own paths, which the service calls: ranges into
	// a reused slice, like the peers' single values, and UUIDs as strings, like the peers'
	// (string) rows.
	targets := []struct {
		name string
		fn   func(b *testing.B)
	}{
		{"coordkit/segment", func(b *testing.B) {
			for b.Loop() {
				var err error
				segIDs, err = seg.AppendRanges(ctx, segIDs[:0], "bench", 1)
				check(err)
			}
		}},
		{"coordkit/snowflake", func(b *testing.B) {
			for b.Loop() {
				var err error
				sfIDs, err = sf.AppendRanges(ctx, sfIDs[:0], 1)
				check(err)
			}
		}},
		{"bwmarrin/snowflake", func(b *testing.B) {
			for b.Loop() {
				node.Generate()
			}
		}},
		{"coordkit/uuid-v7 (string)", func(b *testing.B) {
			for b.Loop() {
				_ = uuids.V7()
			}
		}},
		{"google/uuid v7 (string)", func(b *testing.B) {
			for b.Loop() {
				u, err := uuid.NewV7()
				check(err)
				_ = u.String()
			}
		}},
		{"google/uuid v7", func(b *testing.B) {
			for b.Loop() {
				_, err := uuid.NewV7()
				check(err)
			}
		}},
		{"coordkit/uuid-v4 (string)", func(b *testing.B) {
			for b.Loop() {
				_ = uuids.V4()
			}
		}},
		{"google/uuid v4 (string)", func(b *testing.B) {
			for b.Loop() {
				u, err := uuid.NewRandom()
				check(err)
				_ = u.String()
			}
		}},
		{"google/uuid v4", func(b *testing.B) {
			for b.Loop() {
				_, err := uuid.NewRandom()
				check(err)
			}
		}},
	}
	// Each target runs genRounds times, the targets taking turns, and keeps its fastest
	// round: on a shared machine a burst of other work then spoils no comparison, and
	// peers get the same treatment.
	out := make([]genResult, len(targets))
	for round := range genRounds {
		for i, tgt := range targets {
			runtime.GC()
			r := testing.Benchmark(func(b *testing.B) { b.ReportAllocs(); tgt.fn(b) })
			g := genResult{Target: tgt.name, NsPerOp: float64(r.T.Nanoseconds()) / float64(max(r.N, 1)), Allocs: r.AllocsPerOp()}
			if round == 0 || g.NsPerOp < out[i].NsPerOp {
				out[i] = g
			}
		}
	}
	return out, firstErr
}

// sqlIDConns is the pool of an in-process ID service on --mysql-dsn or --postgres-url:
// reservations are rare (one per segment, a lease renewal every few seconds) and short.
const sqlIDConns = 8

// genRounds is how many times each generator is measured; the fastest round counts.
const genRounds = 2

// openIDService starts the ID service in-process (unless --server names one) and returns its
// URL, the modes to measure and the function that stops it. Its segments and leases live in
// db (MySQL or PostgreSQL), or with db nil in a SQLite file of its own.
func openIDService(ctx context.Context, cfg benchIDConfig, db *sqldb.DB) (string, []idgenv1.Mode, func() error, error) {
	modes := []idgenv1.Mode{idgenv1.Mode_MODE_UUID_V4, idgenv1.Mode_MODE_UUID_V7, idgenv1.Mode_MODE_SNOWFLAKE, idgenv1.Mode_MODE_SEGMENT}
	if cfg.redisAddr != "" {
		modes = append(modes, idgenv1.Mode_MODE_REDIS_INCR)
	}
	if cfg.serverURL != "" {
		return cfg.serverURL, modes, func() error { return nil }, nil
	}
	dir, err := os.MkdirTemp("", "coord-bench-id-")
	if err != nil {
		return "", nil, nil, fmt.Errorf("bench: %w", err)
	}
	var closers service.Closers
	closers.Add(func() error { return os.RemoveAll(dir) })
	logger := slog.New(slog.DiscardHandler)
	deps := service.Deps{DataDir: dir, Logger: logger, SQLiteSynchronous: cfg.sqliteSync}
	icfg := idgenservice.Config{RedisPrefix: "coordkit:bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"}
	switch {
	case db == nil:
		icfg.Store = idgenservice.StoreSQLite
	case db.Dialect.Name == sqldb.Postgres.Name:
		deps.Postgres, icfg.Store = db, idgenservice.StorePostgres
	default:
		deps.MySQL, icfg.Store = db, idgenservice.StoreMySQL
	}
	if cfg.redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: 64})
		closers.Add(rdb.Close)
		if err := rdb.Ping(ctx).Err(); err != nil {
			return "", nil, nil, closers.Fail(fmt.Errorf("bench: --redis-addr %s: %w", cfg.redisAddr, err))
		}
		deps.Redis = rdb
	}
	srv := server.New(server.Config{Logger: logger})
	deps.Registerer = srv.Registry()
	svc, closeSvc, err := idgenservice.OpenService(ctx, deps, icfg)
	if err != nil {
		return "", nil, nil, closers.Fail(fmt.Errorf("bench: %w", err))
	}
	closers.Add(closeSvc)
	srv.Handle(idgenv1connect.NewIdServiceHandler(svc, srv.HandlerOptions()...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, closers.Fail(fmt.Errorf("bench: %w", err))
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(serveCtx, ln) }()
	stop := func() error {
		cancel()
		return errors.Join(<-errc, closers.Close())
	}
	return "http://" + ln.Addr().String(), modes, stop, nil
}

// runIDService measures every mode with single IDs and with batches, one run at a time,
// then the SDK's Next from one goroutine per mode.
func runIDService(ctx context.Context, cfg benchIDConfig, url string, modes []idgenv1.Mode, stderr io.Writer) (out []idRunResult, sdk []genResult, err error) {
	c := idgenv1connect.NewIdServiceClient(client.DefaultHTTPClient(), url)
	tag := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Step: 1000}); err != nil {
		return nil, nil, fmt.Errorf("bench: create segment tag: %w", err)
	}
	// The tag is the benchmark's own: delete it even when the run was interrupted, so a
	// --server run leaves no tag behind (only its tombstone, which ListTags does not show).
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, derr := c.DeleteTag(dctx, &idgenv1.DeleteTagRequest{Tag: tag}); derr != nil {
			err = errors.Join(err, fmt.Errorf("bench: delete segment tag %s: %w", tag, derr))
		}
	}()
	if out, err = runIDModes(ctx, cfg, c, tag, modes, "", stderr); err != nil {
		return out, nil, err
	}
	sdk, err = benchSDK(ctx, url, tag, modes)
	return out, sdk, err
}

// runIDModes measures each of modes through c with single IDs and with batches, one run at
// a time; suffix follows each target's name.
func runIDModes(ctx context.Context, cfg benchIDConfig, c idgenv1connect.IdServiceClient, tag string, modes []idgenv1.Mode, suffix string, stderr io.Writer) ([]idRunResult, error) {
	var out []idRunResult
	for _, m := range modes {
		for _, count := range []int{1, cfg.batch} {
			req := &idgenv1.NextRequest{Mode: m, Count: uint32(count)}
			if m == idgenv1.Mode_MODE_SEGMENT || m == idgenv1.Mode_MODE_REDIS_INCR {
				req.Tag = tag
			}
			call := func(ctx context.Context, _ string) error {
				res, err := c.Next(ctx, req)
				if err == nil && len(res.GetIds()) != count {
					err = fmt.Errorf("got %d IDs, want %d", len(res.GetIds()), count)
				}
				return err
			}
			runtime.GC()
			r := runLoad(ctx, call, "id", cfg.clients, cfg.warmup, cfg.duration)
			if ctx.Err() != nil {
				return out, fmt.Errorf("bench: %w", context.Cause(ctx))
			}
			r.Target = "service/" + modeLabel(m) + suffix
			if r.Errors > 0 {
				fmt.Fprintf(stderr, "bench: %s count %d: %d errors, first: %s\n", r.Target, count, r.Errors, r.FirstError)
			}
			out = append(out, idRunResult{runResult: r, Count: count, IDsPerSec: r.PairsPerSec * float64(count)})
		}
	}
	return out, nil
}

// reserveStep is the step of the tag the store rows reserve segments of: each Reserve is
// one transaction on the tag's row, whatever the step.
const reserveStep = 1000

// idStore is a SQL store of the store rows: its name and how it opens; service says whether
// the segment mode also runs through an ID service on it (the SQLite one is the service
// table's own).
type idStore struct {
	name    string
	service bool
	open    func(ctx context.Context) (*sqldb.DB, error)
}

// runIDStores measures each SQL store: the segment mode through an in-process ID service on
// it (MySQL, PostgreSQL), then bare reservations (segment.Store.Reserve, cfg.clients at once
// on one tag, each a transaction on its row) on every store.
func runIDStores(ctx context.Context, cfg benchIDConfig, stderr io.Writer) ([]idRunResult, error) {
	dir, err := os.MkdirTemp("", "coord-bench-id-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	stores := []idStore{{name: "sqlite", open: func(ctx context.Context) (*sqldb.DB, error) {
		return sqldb.OpenSQLite(ctx, filepath.Join(dir, "reserve.db"), sqldb.WithSynchronous(cfg.sqliteSync))
	}}}
	if cfg.mysqlDSN != "" {
		stores = append(stores, idStore{name: "mysql", service: true, open: func(ctx context.Context) (*sqldb.DB, error) {
			db, err := sqldb.OpenMySQL(ctx, cfg.mysqlDSN, sqlIDConns)
			if err != nil {
				return nil, fmt.Errorf("bench: --mysql-dsn: %w", err)
			}
			return db, nil
		}})
	}
	if cfg.postgresURL != "" {
		stores = append(stores, idStore{name: "postgres", service: true, open: func(ctx context.Context) (*sqldb.DB, error) {
			db, err := sqldb.OpenPostgres(ctx, cfg.postgresURL, sqldb.PostgresConfig{MaxConns: sqlIDConns})
			if err != nil {
				return nil, fmt.Errorf("bench: --postgres-url: %w", err)
			}
			return db, nil
		}})
	}
	var out []idRunResult
	for _, st := range stores {
		runs, err := runIDStore(ctx, cfg, st, stderr)
		out = append(out, runs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// runIDStore measures one store of runIDStores.
func runIDStore(ctx context.Context, cfg benchIDConfig, st idStore, stderr io.Writer) (out []idRunResult, err error) {
	db, err := st.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	label := " (" + st.name + ")"
	if st.service {
		scfg := cfg
		scfg.serverURL = ""
		url, _, stop, err := openIDService(ctx, scfg, db)
		if err != nil {
			return nil, err
		}
		c := idgenv1connect.NewIdServiceClient(client.DefaultHTTPClient(), url)
		tag := "bench:" + st.name + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if _, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Step: reserveStep}); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: create segment tag on %s: %w", st.name, err), stop())
		}
		out, err = runIDModes(ctx, cfg, c, tag, []idgenv1.Mode{idgenv1.Mode_MODE_SEGMENT}, label, stderr)
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, derr := c.DeleteTag(dctx, &idgenv1.DeleteTagRequest{Tag: tag})
		cancel()
		if err = errors.Join(err, derr, stop()); err != nil {
			return out, err
		}
	}

	store, err := segment.NewStore(ctx, db)
	if err != nil {
		return out, err
	}
	tag := "bench:reserve:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := store.Create(ctx, tag, 1, reserveStep, ""); err != nil {
		return out, fmt.Errorf("bench: create segment tag on %s: %w", st.name, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, derr := store.Delete(dctx, tag); derr != nil {
			err = errors.Join(err, fmt.Errorf("bench: delete segment tag %s on %s: %w", tag, st.name, derr))
		}
	}()
	call := func(ctx context.Context, _ string) error {
		_, err := store.Reserve(ctx, tag, 0)
		return err
	}
	runtime.GC()
	r := runLoad(ctx, call, "id-reserve", cfg.clients, cfg.warmup, cfg.duration)
	if ctx.Err() != nil {
		return out, fmt.Errorf("bench: %w", context.Cause(ctx))
	}
	r.Target = "store/" + st.name + " reserve"
	if r.Errors > 0 {
		fmt.Fprintf(stderr, "bench: %s: %d errors, first: %s\n", r.Target, r.Errors, r.FirstError)
	}
	return append(out, idRunResult{runResult: r, Count: reserveStep, IDsPerSec: r.PairsPerSec * reserveStep}), nil
}

// storePeers are the store rows compared in the notes under the service table: PostgreSQL's
// over MySQL's, measured in the same run.
var storePeers = [][2]string{
	{"service/segment (postgres)", "service/segment (mysql)"},
	{"store/postgres reserve", "store/mysql reserve"},
}

// benchSDK measures the SDK's Next from one goroutine per mode, served from the blocks it
// fetches ahead: testing.Benchmark for ns/op, then a million calls (a quarter for the
// modes the service makes per ID) timed one by one, to count those that waited for a fetch.
func benchSDK(ctx context.Context, url, tag string, modes []idgenv1.Mode) ([]genResult, error) {
	ids := client.New(url).IDs()
	var out []genResult
	for _, m := range modes {
		t := ""
		if m == idgenv1.Mode_MODE_SEGMENT || m == idgenv1.Mode_MODE_REDIS_INCR {
			t = tag
		}
		if _, err := ids.Next(ctx, m, t); err != nil { // the first call fetches
			return out, fmt.Errorf("bench: sdk %s: %w", modeLabel(m), err)
		}
		var firstErr error
		runtime.GC()
		r := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ids.Next(ctx, m, t); err != nil && firstErr == nil {
					firstErr = err
				}
			}
		})
		if firstErr != nil {
			return out, fmt.Errorf("bench: sdk %s: %w", modeLabel(m), firstErr)
		}
		g := genResult{Target: "sdk/" + modeLabel(m) + " Next (1 goroutine)", NsPerOp: float64(r.T.Nanoseconds()) / float64(max(r.N, 1)),
			Allocs: r.AllocsPerOp(), TimedCalls: 1_000_000}
		if !numericRanges(m) {
			g.TimedCalls /= 4
		}
		for range g.TimedCalls {
			begin := time.Now()
			_, err := ids.Next(ctx, m, t)
			d := time.Since(begin)
			if err != nil {
				return out, fmt.Errorf("bench: sdk %s: %w", modeLabel(m), err)
			}
			if d > sdkSlowCall {
				g.SlowCalls++
			}
			g.MaxCall = max(g.MaxCall, d)
		}
		out = append(out, g)
	}
	return out, nil
}

// numericRanges reports whether the service hands out mode's IDs as ranges, which cost it
// nothing per ID.
func numericRanges(m idgenv1.Mode) bool {
	return m == idgenv1.Mode_MODE_SEGMENT || m == idgenv1.Mode_MODE_REDIS_INCR
}

// modeNames maps coord id's mode names to the API's.
var modeNames = map[string]idgenv1.Mode{
	"uuid-v4":    idgenv1.Mode_MODE_UUID_V4,
	"uuid-v7":    idgenv1.Mode_MODE_UUID_V7,
	"snowflake":  idgenv1.Mode_MODE_SNOWFLAKE,
	"segment":    idgenv1.Mode_MODE_SEGMENT,
	"redis-incr": idgenv1.Mode_MODE_REDIS_INCR,
}

// modeLabel is the CLI name of a mode.
func modeLabel(m idgenv1.Mode) string {
	for name, v := range modeNames {
		if v == m {
			return name
		}
	}
	return m.String()
}

// writeIDReport prints the generator table, the segment switch line and the service table,
// or one JSON object.
func writeIDReport(w io.Writer, gens []genResult, sw switchResult, runs []idRunResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Generators    []genResult   `json:"generators"`
			SegmentSwitch switchResult  `json:"segment_switch"`
			Service       []idRunResult `json:"service"`
		}{gens, sw, runs})
	}
	return writeTables(w, idTables(gens, sw, runs)...)
}

// idTables are the tables of `coordbench id`: the in-process generators, the segment
// switch line and the service runs.
func idTables(gens []genResult, sw switchResult, runs []idRunResult) []benchTable {
	g := benchTable{header: []string{"generator", "ns/op", "allocs/op"}}
	byTarget := map[string]genResult{}
	for _, r := range gens {
		g.rows = append(g.rows, []string{r.Target, fmt.Sprintf("%.1f", r.NsPerOp), strconv.FormatInt(r.Allocs, 10)})
		byTarget[r.Target] = r
	}
	for _, p := range genPeers {
		ours, okOurs := byTarget[p[0]]
		peer, okPeer := byTarget[p[1]]
		if !okOurs || !okPeer || peer.NsPerOp <= 0 {
			continue
		}
		note := fmt.Sprintf("ratio %s ÷ %s (ns/op, fastest of %d rounds each): %.2f", p[0], p[1], genRounds, ours.NsPerOp/peer.NsPerOp)
		if p[1] == "bwmarrin/snowflake" {
			note += fmt.Sprintf("; both are bound by the layout's 4096 IDs per millisecond, %.1f ns/op", 1e6/float64(snowflake.MaxSequence+1))
		}
		g.notes = append(g.notes, note)
	}
	for _, r := range gens {
		if r.TimedCalls > 0 {
			g.notes = append(g.notes, fmt.Sprintf("%s: %.1fM IDs/s; of %d calls timed one by one, %d took over %v (waited for a fetch), the longest %v",
				r.Target, 1e3/r.NsPerOp, r.TimedCalls, r.SlowCalls, sdkSlowCall, fmtLatency(r.MaxCall)))
		}
	}
	s := benchTable{header: []string{"target", "clients", "count", "calls", "calls/s", "ids/s", "p50", "p99", "max", "errors"}}
	byRun := map[string]idRunResult{}
	for _, r := range runs {
		s.rows = append(s.rows, []string{r.Target, strconv.Itoa(r.Clients), strconv.Itoa(r.Count), strconv.Itoa(r.Pairs),
			fmt.Sprintf("%.0f", r.PairsPerSec), fmt.Sprintf("%.0f", r.IDsPerSec), fmtLatency(r.P50), fmtLatency(r.P99),
			fmtLatency(r.Max), strconv.Itoa(r.Errors)})
		byRun[r.Target+"/"+strconv.Itoa(r.Count)] = r
	}
	for _, p := range storePeers {
		for _, r := range runs {
			peer, ok := byRun[p[1]+"/"+strconv.Itoa(r.Count)]
			if r.Target != p[0] || !ok || peer.PairsPerSec <= 0 || peer.P99 <= 0 {
				continue
			}
			s.notes = append(s.notes, fmt.Sprintf("ratio %s ÷ %s at count %d: calls/s %.2f, p99 %.2f",
				p[0], p[1], r.Count, r.PairsPerSec/peer.PairsPerSec, float64(r.P99)/float64(peer.P99)))
		}
	}
	return []benchTable{g, {notes: []string{switchLine(sw)}}, s}
}
