package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// probeTimeout bounds each question the report asks a backend or git.
const probeTimeout = 3 * time.Second

// benchPeerModules are the modules whose versions the report names: the peers, and the
// clients and servers linked into coord that the numbers depend on.
var benchPeerModules = []struct{ name, path string }{
	{"go-redsync", "github.com/go-redsync/redsync/v4"},
	{"bwmarrin/snowflake", "github.com/bwmarrin/snowflake"},
	{"google/uuid", "github.com/google/uuid"},
	{"hibiken/asynq", "github.com/hibiken/asynq"},
	{"go-redis", "github.com/redis/go-redis/v9"},
	{"connect-go", "connectrpc.com/connect"},
	{"NATS server (embedded)", "github.com/nats-io/nats-server/v2"},
}

// probeMachine describes the machine and the backends the benchmarks of cfg run on, as
// name and value pairs; what cannot be found says so instead of failing the report.
func probeMachine(ctx context.Context, cfg benchAllConfig) [][2]string {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return string(b)
	}
	orUnknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	out := [][2]string{
		{"cores", fmt.Sprintf("%d (runtime.NumCPU; GOMAXPROCS %d)", runtime.NumCPU(), runtime.GOMAXPROCS(0))},
		{"CPU", orUnknown(cpuModel(read("/proc/cpuinfo")))},
		{"memory", orUnknown(memTotal(read("/proc/meminfo")))},
		{"OS", orUnknown(osRelease(read("/etc/os-release")))},
		{"kernel", orUnknown(strings.TrimSpace(strings.TrimSpace(read("/proc/sys/kernel/ostype")) + " " + strings.TrimSpace(read("/proc/sys/kernel/osrelease"))))},
		{"load average before", loadAverage()},
		{"Go", runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
	}
	out = append(out,
		[2]string{"Redis", redisVersion(ctx, cfg.lock.redisAddr)},
		[2]string{"MySQL/MariaDB", mysqlVersion(ctx, cfg.lock.mysqlDSN)},
		[2]string{"PostgreSQL", postgresVersion(ctx, cfg.lock.pgURL)},
	)
	if len(cfg.lock.zkAddrs) > 0 {
		out = append(out, [2]string{"ZooKeeper", zooKeeperVersion(ctx, cfg.lock.zkAddrs[0])})
	}
	deps := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			deps[d.Path] = d.Version
		}
	}
	for _, m := range benchPeerModules {
		out = append(out, [2]string{m.name, orUnknown(deps[m.path])})
	}
	return out
}

// cpuModel returns the first model name in the text of /proc/cpuinfo, or "".
func cpuModel(cpuinfo string) string {
	for line := range strings.Lines(cpuinfo) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memTotal returns MemTotal from the text of /proc/meminfo in GiB, or "".
func memTotal(meminfo string) string {
	for line := range strings.Lines(meminfo) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				return fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return ""
}

// osRelease returns PRETTY_NAME from the text of /etc/os-release, or "".
func osRelease(text string) string {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
			return v
		}
	}
	return ""
}

// loadAverage returns the 1, 5 and 15 minute load averages from /proc/loadavg: others'
// work on a shared machine shows there.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// redisVersion asks the Redis at addr for its version.
func redisVersion(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	if v := infoField(info, "redis_version"); v != "" {
		return v + " at " + addr
	}
	return "unknown"
}

// infoField returns a field of the text of Redis's INFO, or "".
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// mysqlVersion asks the MySQL or MariaDB of dsn for its version.
func mysqlVersion(ctx context.Context, dsn string) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	db, err := sqldb.OpenMySQL(ctx, dsn, 1)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return v
}

// postgresVersion asks the PostgreSQL at rawURL for its version.
func postgresVersion(ctx context.Context, rawURL string) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	db, err := sqldb.OpenPostgres(ctx, rawURL, sqldb.PostgresConfig{MaxConns: 1})
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return v
}

// zooKeeperVersion asks the ZooKeeper server at addr for its version with the srvr
// four-letter word (allowed by deploy/dev).
func zooKeeperVersion(ctx context.Context, addr string) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if v := zkVersion(line); v != "" {
		return v
	}
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return "unknown (srvr answered " + strconv.Quote(strings.TrimSpace(line)) + ")"
}

// zkVersion returns the version in the first line of ZooKeeper's srvr answer
// ("Zookeeper version: 3.8.4-…, built on …"), or "". Debian's build leaves its git
// placeholder in ("3.8.0-${mvngit.commit.id}"), which is dropped.
func zkVersion(line string) string {
	v, ok := strings.CutPrefix(strings.TrimSpace(line), "Zookeeper version: ")
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, ",")
	v, _, _ = strings.Cut(v, "-${")
	return strings.TrimSpace(v)
}

// gitCommit returns the commit of the working tree the report is made in, marked when
// the tree has changes that are not committed, or why it is unknown.
func gitCommit(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown (git rev-parse HEAD: " + err.Error() + ")"
	}
	commit := "`" + strings.TrimSpace(string(rev)) + "`"
	// --no-optional-locks: only look, never refresh the index under someone else's feet.
	status, err := exec.CommandContext(ctx, "git", "--no-optional-locks", "status", "--porcelain").Output()
	switch {
	case err != nil:
		return commit + " (uncommitted changes unknown: " + err.Error() + ")"
	case len(strings.TrimSpace(string(status))) > 0:
		return commit + " plus uncommitted changes"
	}
	return commit
}
