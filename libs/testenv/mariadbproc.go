package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver
)

// MariaDBProcess is a private MariaDB server for fault tests that stop and restart it,
// leaving the shared one on 3306 alone. Its data survives Stop and Start.
type MariaDBProcess struct {
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// StartMariaDB installs a fresh data directory and starts mariadbd on a free loopback port
// with a database named coordkit. It is killed when the test ends.
func StartMariaDB(t testing.TB) *MariaDBProcess {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(dir, "data"),
		"--user=root", "--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: mariadb-install-db (install mariadb-server with deploy/dev/backends.sh up): %v\n%s", err, out)
	}
	p := &MariaDBProcess{t: t, dir: dir, port: FreePort(t)}
	p.Start()
	t.Cleanup(func() {
		if p.cmd != nil {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	db := p.open()
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS coordkit"); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	return p
}

// DSN is the go-sql-driver DSN of the coordkit database on this server.
func (p *MariaDBProcess) DSN() string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/coordkit", p.port)
}

// Start starts the server and waits until it answers.
func (p *MariaDBProcess) Start() {
	p.t.Helper()
	p.cmd = exec.Command("mariadbd", "--no-defaults", "--datadir="+filepath.Join(p.dir, "data"),
		fmt.Sprintf("--port=%d", p.port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(p.dir, "sock"),
		"--user=root", "--pid-file="+filepath.Join(p.dir, "pid"), "--innodb-buffer-pool-size=16M",
		"--skip-log-bin", "--max-connections=512")
	log, err := os.Create(filepath.Join(p.dir, "server.log"))
	if err != nil {
		p.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("testenv: start mariadbd: %v", err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); log.Close(); close(p.done) }()
	db := p.open()
	db.Close()
}

// Stop shuts the server down cleanly (SIGTERM) and waits for it to exit.
func (p *MariaDBProcess) Stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatal("testenv: mariadbd did not stop")
	}
	p.cmd = nil
}

// open waits up to 30s for the server to answer and returns a handle without a database.
func (p *MariaDBProcess) open() *sql.DB {
	p.t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", p.port))
	if err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return db
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("testenv: mariadbd on port %d did not answer: %v", p.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
