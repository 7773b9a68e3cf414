package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/sqldb"
)

// Process names (/proc/<pid>/comm) of the backends, to tell that a pid a server reported is
// that server on this machine and not some process of another pid namespace (a container).
var (
	redisComms    = []string{"redis"}
	mysqlComms    = []string{"mariadbd", "mysqld"}
	postgresComms = []string{"postgres", "postmaster"}
)

// zooKeeperMains are the main classes of a ZooKeeper server's JVM.
var zooKeeperMains = []string{"QuorumPeerMain", "ZooKeeperServerMain"}

// backendProcs finds the processes of the backend of every target in cfg, for the CPU
// columns: by backend ("redis", "redlock", "zookeeper", "mysql", "postgres", "sqlite"), the group of
// pids, none for SQLite, or unknown. A backend that cannot be found (on another machine, in a
// container, /proc not readable) is unknown and said so on stderr, never an error.
func backendProcs(ctx context.Context, cfg benchConfig, warn func(string)) map[string]procGroup {
	find := map[string]func(context.Context) ([]int, error){
		"redis":     func(ctx context.Context) ([]int, error) { return redisPIDs(ctx, []string{cfg.redisAddr}) },
		"redlock":   func(ctx context.Context) ([]int, error) { return redisPIDs(ctx, cfg.redlock) },
		"zookeeper": func(ctx context.Context) ([]int, error) { return zooKeeperPIDs(ctx, cfg.zkAddrs) },
		"mysql":     func(ctx context.Context) ([]int, error) { return mysqlPIDs(ctx, cfg.mysqlDSN) },
		"postgres":  func(ctx context.Context) ([]int, error) { return postgresPIDs(ctx, cfg.pgURL) },
	}
	out := map[string]procGroup{}
	for _, target := range cfg.targets {
		backend := targetBackend(target)
		if _, done := out[backend]; done {
			continue
		}
		if backend == "sqlite" {
			out[backend] = procGroup{none: true}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		pids, err := find[backend](pctx)
		cancel()
		if err != nil {
			warn(fmt.Sprintf("bench: cpu/pair of the %s backend unknown: %v", backend, err))
		}
		out[backend] = procGroup{pids: pids, tree: backend == "postgres"}
	}
	return out
}

// targetBackend is the backend a target locks on, the part of its name after the slash:
// redsync/redlock and service/redlock both run on the Redlock nodes.
func targetBackend(target string) string {
	_, backend, _ := strings.Cut(target, "/")
	return backend
}

// redisPIDs returns the processes of the Redis servers at addrs, which must all run on this
// machine: the process_id each reports in INFO, checked against /proc.
func redisPIDs(ctx context.Context, addrs []string) ([]int, error) {
	var pids []int
	for _, addr := range addrs {
		if !isLocalAddr(ctx, addr) {
			return nil, fmt.Errorf("redis %s is not on this machine", addr)
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
		info, err := rdb.Info(ctx, "server").Result()
		rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("redis %s: %w", addr, err)
		}
		pid, err := strconv.Atoi(infoField(info, "process_id"))
		if err != nil {
			return nil, fmt.Errorf("redis %s: INFO has no process_id", addr)
		}
		if err := checkComm(pid, redisComms); err != nil {
			return nil, fmt.Errorf("redis %s: %w", addr, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// mysqlPIDs returns the process of the MySQL or MariaDB server of dsn when it runs on this
// machine (its @@hostname is this one's): the pid in its @@pid_file or, when that cannot be
// read, the only mariadbd or mysqld process there is.
func mysqlPIDs(ctx context.Context, dsn string) ([]int, error) {
	db, err := sqldb.OpenMySQL(ctx, dsn, 1)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var host, pidFile string
	if err := db.QueryRowContext(ctx, "SELECT @@hostname, @@pid_file").Scan(&host, &pidFile); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	if h, err := os.Hostname(); err != nil || h != host {
		return nil, fmt.Errorf("mysql runs on host %q, not on this one", host)
	}
	b, ferr := os.ReadFile(pidFile)
	if ferr == nil {
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && checkComm(pid, mysqlComms) == nil {
			return []int{pid}, nil
		}
		ferr = fmt.Errorf("%s holds no %s pid", pidFile, strings.Join(mysqlComms, " or "))
	}
	var pids []int
	err = scanProcs(func(pid int) {
		if checkComm(pid, mysqlComms) == nil {
			pids = append(pids, pid)
		}
	})
	if err == nil && len(pids) == 1 {
		return pids, nil
	}
	return nil, fmt.Errorf("mysql: %v, and %d %s processes on this machine", ferr, len(pids), strings.Join(mysqlComms, " or "))
}

// postgresPIDs returns the postmaster of the PostgreSQL server at rawURL when it runs on
// this machine: the parent of the server process of a connection. Its group counts its
// children too (procTreeCPU), the process of every connection among them.
func postgresPIDs(ctx context.Context, rawURL string) ([]int, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !isLocalAddr(ctx, u.Host) {
		return nil, fmt.Errorf("postgres %s is not on this machine", sqldb.RedactPostgresURL(rawURL))
	}
	db, err := sqldb.OpenPostgres(ctx, rawURL, sqldb.PostgresConfig{MaxConns: 1})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var backend int
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	st, err := readProcStat(backend)
	if err != nil {
		return nil, fmt.Errorf("postgres: connection process %d: %w", backend, err)
	}
	if err := checkComm(st.ppid, postgresComms); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return []int{st.ppid}, nil
}

// procStat is what the CPU columns read of /proc/<pid>/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime uint64 // in USER_HZ ticks
}

// readProcStat reads /proc/<pid>/stat; the command name, field 2, is in parentheses and may
// hold spaces and parentheses itself, so the fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errProcStat
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3; ppid is 4, utime to cstime 14 to 17
	if len(f) < 15 {
		return procStat{}, errProcStat
	}
	var st procStat
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, errProcStat
	}
	st.ppid = ppid
	for i, p := range []*uint64{&st.utime, &st.stime, &st.cutime, &st.cstime} {
		if *p, err = strconv.ParseUint(f[11+i], 10, 64); err != nil {
			return procStat{}, errProcStat
		}
	}
	return st, nil
}

// procTreeCPU is the CPU time of pid and its children: its own, what its ended children
// used (cutime and cstime, which it collected when they ended) and what its living
// children have used so far. A child that ends between two readings moves its time from
// the living to the collected, so the sum only grows.
func procTreeCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	ticks := st.utime + st.stime + st.cutime + st.cstime
	err = scanProcs(func(child int) {
		if c, err := readProcStat(child); err == nil && c.ppid == pid {
			ticks += c.utime + c.stime
		}
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// zooKeeperPIDs returns the processes of the ZooKeeper servers at addrs, which must all run
// on this machine: the JVM running a ZooKeeper main class whose client port is the
// address's, or the only ZooKeeper server there is when its port cannot be told.
func zooKeeperPIDs(ctx context.Context, addrs []string) ([]int, error) {
	servers, err := zooKeeperServers()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, addr := range addrs {
		if !isLocalAddr(ctx, addr) {
			return nil, fmt.Errorf("zookeeper %s is not on this machine", addr)
		}
		_, port, _ := net.SplitHostPort(addr)
		var match []int
		for pid, p := range servers {
			if strconv.Itoa(p) == port {
				match = append(match, pid)
			}
		}
		if len(match) == 0 && len(servers) == 1 {
			for pid, p := range servers {
				if p == 0 {
					match = append(match, pid)
				}
			}
		}
		if len(match) != 1 {
			return nil, fmt.Errorf("zookeeper %s: %d of the %d ZooKeeper servers on this machine listen there", addr, len(match), len(servers))
		}
		pids = append(pids, match[0])
	}
	return pids, nil
}

// zooKeeperServers returns the ZooKeeper servers running on this machine, found by their main
// class in /proc/*/cmdline, each with its client port (0 when it cannot be told).
func zooKeeperServers() (map[int]int, error) {
	out := map[int]int{}
	err := scanProcs(func(pid int) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			return
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		i := slices.IndexFunc(args, func(a string) bool {
			return slices.ContainsFunc(zooKeeperMains, func(m string) bool { return strings.HasSuffix(a, m) })
		})
		if i < 0 {
			return
		}
		out[pid] = 0
		if i+1 < len(args) {
			out[pid] = zooKeeperPort(args[i+1])
		}
	})
	if err == nil && len(out) == 0 {
		err = errors.New("no ZooKeeper server process on this machine")
	}
	return out, err
}

// zooKeeperPort returns the client port of a ZooKeeper server from the argument after its
// main class: the port itself (ZooKeeperServerMain port datadir) or the configuration file
// with clientPort=; 0 when it cannot be told.
func zooKeeperPort(arg string) int {
	if p, err := strconv.Atoi(arg); err == nil {
		return p
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "clientPort" {
			p, _ := strconv.Atoi(strings.TrimSpace(v))
			return p
		}
	}
	return 0
}

// scanProcs calls fn with the pid of every process in /proc.
func scanProcs(fn func(pid int)) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			fn(pid)
		}
	}
	return nil
}

// checkComm checks that process pid exists here and that its name holds one of names.
func checkComm(pid int, names []string) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	comm := strings.TrimSpace(string(b))
	if !slices.ContainsFunc(names, func(n string) bool { return strings.Contains(comm, n) }) {
		return fmt.Errorf("pid %d is %q here, not %s: the server runs elsewhere (a container?)", pid, comm, strings.Join(names, " or "))
	}
	return nil
}

// isLocalAddr reports whether the host of host:port is this machine: a loopback address, or
// one of its interfaces' addresses.
func isLocalAddr(ctx context.Context, addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		found, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return false
		}
		for _, a := range found {
			ips = append(ips, a.IP)
		}
	}
	ifaces, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range ifaces {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
