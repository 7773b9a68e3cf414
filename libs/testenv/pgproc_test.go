package testenv

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStartPostgres attacks the private PostgreSQL server's fault handles: a Kill leaves no
// process of the server behind and a committed row survives it (crash recovery on the same
// data directory and port); TerminateBackends ends exactly the named application's
// connections; the server and its directory are gone when the test ends.
func TestStartPostgres(t *testing.T) {
	var pid int
	var dir string
	t.Run("server", func(t *testing.T) {
		p := StartPostgres(t)
		pid, dir = p.PID(), p.dir
		url := p.URL()
		db := openPostgres(t, url, "testenv")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('before the kill')"); err != nil {
			t.Fatal(err)
		}
		children := childPIDs(p.PID())
		if len(children) == 0 {
			t.Fatal("the postmaster has no child process: the kill below would prove nothing")
		}

		p.Kill()
		for _, c := range append(children, pid) {
			if alive(c) {
				t.Errorf("process %d of the killed server still runs", c)
			}
		}
		if err := db.PingContext(ctx); err == nil {
			t.Error("a query on the killed server succeeded")
		}

		p.Start()
		if p.URL() != url {
			t.Errorf("restarted server's URL %s, want the same %s", p.URL(), url)
		}
		var v string
		if err := db.QueryRowContext(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "before the kill" {
			t.Errorf("after the restart the committed row reads %q, %v; want it kept", v, err)
		}

		p.Restart()
		if err := db.QueryRowContext(ctx, "SELECT v FROM kept").Scan(&v); err != nil {
			t.Errorf("after Restart: %v", err)
		}

		// TerminateBackends: the victims' held connections break, others stay.
		victim, bystander := pinnedConn(t, ctx, url, "victim"), pinnedConn(t, ctx, url, "bystander")
		// Only busy ones: an idle victim stays; mid-transaction it is ended.
		if n, busy, err := p.TerminateBackends(ctx, "victim", true); err != nil || n != 0 || busy != 0 {
			t.Errorf("TerminateBackends(victim, busy only) of an idle connection = %d ended, %d busy, %v; want 0, 0", n, busy, err)
		}
		if _, err := victim.ExecContext(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		n, busy, err := p.TerminateBackends(ctx, "victim", false)
		if err != nil || n != 1 || busy != 1 {
			t.Errorf("TerminateBackends(victim) = %d ended, %d busy, %v; want 1, 1", n, busy, err)
		}
		if _, err := victim.ExecContext(ctx, "SELECT 1"); err == nil {
			t.Error("the terminated connection still answers")
		}
		if _, err := bystander.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Errorf("another application's connection broke: %v", err)
		}
	})
	if alive(pid) {
		t.Errorf("the postmaster %d outlived its test", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the data directory %s outlived its test: %v", dir, err)
	}
}

// openPostgres opens url with application_name app; closed when the test ends.
func openPostgres(t *testing.T, url, app string) *sql.DB {
	t.Helper()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	db, err := sql.Open("pgx", url+sep+"application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// pinnedConn is one connection of application app, kept open until the test ends.
func pinnedConn(t *testing.T, ctx context.Context, url, app string) *sql.Conn {
	t.Helper()
	c, err := openPostgres(t, url, app).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return c
}
