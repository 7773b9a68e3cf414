package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// postgresReadyTimeout bounds how long a started postgres may take to accept connections,
// crash recovery after a kill included.
const postgresReadyTimeout = 30 * time.Second

// postgresReady is what postgres logs once it accepts connections.
const postgresReady = "database system is ready to accept connections"

// PostgresProcess is a private PostgreSQL server for fault tests that kill and restart it
// (the shared dev server on 5432 must never be stopped). Its data directory survives Kill
// and Start: a restarted server runs crash recovery, as after a real crash. It is tuned for
// tests (fsync off): a killed process loses no commit, since each commit's WAL is written
// to the kernel before the commit returns, but a machine crash would.
type PostgresProcess struct {
	*Process
	dir string
}

// StartPostgres runs initdb in a fresh directory and starts postgres on a free loopback port
// with trust authentication and a database named coordkit, from Debian's binaries (the
// newest /usr/lib/postgresql/*/bin), $COORDKIT_TEST_POSTGRES_BIN (a directory) or PATH. As
// root it runs them as the postgres user, since postgres refuses to run as root. The server
// and its data are gone when the test ends. Missing binaries fail the test.
func StartPostgres(t testing.TB) *PostgresProcess {
	t.Helper()
	bin, err := postgresBin()
	if err != nil {
		t.Fatalf("testenv: %v; install PostgreSQL (deploy/dev/backends.sh up does) or set COORDKIT_TEST_POSTGRES_BIN", err)
	}
	cred, err := postgresCredential()
	if err != nil {
		t.Fatalf("testenv: postgres: %v", err)
	}
	// Not t.TempDir: its parents are private to root, and the server may run as postgres.
	dir, err := os.MkdirTemp("", "coordkit-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	p := &PostgresProcess{dir: dir}
	p.Process = StartProcess(t, ProcessConfig{
		Name: "postgres",
		Bin:  filepath.Join(bin, "postgres"),
		Args: func(port int) []string {
			return []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
				"-c", "full_page_writes=off", "-c", "shared_buffers=16MB", "-c", "max_connections=300",
				"-c", "logging_collector=off", "-c", "log_min_messages=warning"}
		},
		Ready:      func(port int) error { return p.ping(port) },
		Timeout:    postgresReadyTimeout,
		Listening:  postgresReady,
		Credential: cred,
	})
	t.Cleanup(p.Kill) // before the Process's own cleanup, which kills the postmaster alone
	db, err := sql.Open("pgx", p.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE coordkit"); err != nil {
		t.Fatalf("testenv: postgres: create database coordkit: %v", err)
	}
	return p
}

// URL is the coordkit database's URL (user postgres, no password, sslmode=disable).
func (p *PostgresProcess) URL() string { return p.url("coordkit") }

func (p *PostgresProcess) url(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", loopback(p.Port()), db)
}

// Kill kills the server as a crash of its machine or container would: SIGKILL to the
// postmaster and every backend process, then waits until all are gone, so that Start can
// take the data directory again. Killing a stopped server does nothing.
func (p *PostgresProcess) Kill() {
	pid := p.PID()
	if pid == 0 {
		return
	}
	children := childPIDs(pid) // postgres forks every backend from the postmaster
	p.Process.Stop()
	for _, c := range children {
		syscall.Kill(c, syscall.SIGKILL) //nolint:errcheck // it may have exited already
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range children {
		for alive(c) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Stop is Kill: a PostgresProcess is only ever stopped the hard way.
func (p *PostgresProcess) Stop() { p.Kill() }

// Restart kills the server (Kill) and starts it again on the same port and data directory,
// waiting until it accepts connections again.
func (p *PostgresProcess) Restart() {
	p.t.Helper()
	p.Kill()
	p.Start()
}

// TerminateBackends ends, with pg_terminate_backend, every connection whose
// application_name is application (as a DBA or a failover does); with busyOnly, only those
// running a statement or inside a transaction right now. It returns how many it ended, and
// how many of those were busy.
func (p *PostgresProcess) TerminateBackends(ctx context.Context, application string, busyOnly bool) (ended, busy int, err error) {
	db, err := sql.Open("pgx", p.url("postgres"))
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(*) FILTER (WHERE state <> 'idle') FROM"+
		" (SELECT state, pg_terminate_backend(pid) FROM pg_stat_activity"+
		" WHERE application_name = $1 AND pid <> pg_backend_pid() AND (NOT $2 OR state <> 'idle')) x",
		application, busyOnly).Scan(&ended, &busy)
	return ended, busy, err
}

// ping connects to the postgres database and runs a query.
func (p *PostgresProcess) ping(port int) error {
	db, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=1", loopback(port)))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// postgresBin is the directory of initdb and postgres.
func postgresBin() (string, error) {
	if dir := os.Getenv("COORDKIT_TEST_POSTGRES_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", fmt.Errorf("postgres: no initdb in $COORDKIT_TEST_POSTGRES_BIN: %w", err)
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return pgMajor(a) - pgMajor(b) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path), nil
	}
	return "", fmt.Errorf("postgres: no initdb in /usr/lib/postgresql/*/bin nor on PATH")
}

// pgMajor is the major version in a /usr/lib/postgresql/<major>/bin path.
func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// postgresCredential is nil when the test does not run as root, else the postgres user's.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and postgres refuses root: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := procStat(c); ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// alive says whether pid runs (a zombie does not: it holds no memory any more).
func alive(pid int) bool {
	_, state := procStat(pid)
	return state != "" && state != "Z"
}

// procStat reads a process's parent and state from /proc/<pid>/stat; zero values when gone.
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}
