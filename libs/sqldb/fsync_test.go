package sqldb

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// syncChildEnv names the database TestSyncChild commits to, syncModeEnv its synchronous
// mode.
const (
	syncChildEnv = "SQLDB_SYNC_CHILD_DB"
	syncModeEnv  = "SQLDB_SYNC_CHILD_MODE"
)

// syncCommits is how many commits TestSyncChild makes.
const syncCommits = 40

// TestSyncChild commits syncCommits small transactions to the database syncChildEnv names,
// for TestSQLiteCommitsFsync to trace; run on its own it does nothing.
func TestSyncChild(t *testing.T) {
	path := os.Getenv(syncChildEnv)
	if path == "" {
		t.Skip("the traced writer of TestSQLiteCommitsFsync")
	}
	mode, err := ParseSynchronous(os.Getenv(syncModeEnv))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db, err := OpenSQLite(ctx, path, WithSynchronous(mode))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS t (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	for i := range syncCommits {
		if _, err := db.ExecContext(ctx, "INSERT INTO t (n) VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSQLiteCommitsFsync traces the system calls of a process that makes 40 commits: each
// commit must reach the disk before it returns, so the process must call fsync or fdatasync
// at least once per commit. SIGKILL tests cannot show this (the page cache outlives the
// process); the trace does. In WAL mode with synchronous=NORMAL the same commits sync only
// at checkpoints. Outside CI it is skipped where strace is missing or cannot trace; in CI
// (deploy/dev/backends.sh installs strace) that is a failure.
func TestSQLiteCommitsFsync(t *testing.T) {
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		skip("no strace: %v", err)
	}
	for _, tc := range []struct {
		env     string
		atLeast bool
	}{{"", true}, {"NORMAL", false}} {
		dir := t.TempDir()
		out := filepath.Join(dir, "strace.txt")
		cmd := exec.Command(strace, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", out,
			os.Args[0], "-test.run=^TestSyncChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), syncChildEnv+"="+filepath.Join(dir, "sync.db"), syncModeEnv+"="+tc.env)
		if b, err := cmd.CombinedOutput(); err != nil {
			skip("strace cannot trace here: %v\n%s", err, b)
		}
		summary, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		syncs := 0
		for _, m := range regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(?:fsync|fdatasync)\s*$`).FindAllStringSubmatch(string(summary), -1) {
			n, _ := strconv.Atoi(m[1])
			syncs += n
		}
		t.Logf("synchronous=%q: %d commits, %d fsync/fdatasync calls", tc.env, syncCommits, syncs)
		if tc.atLeast && syncs < syncCommits {
			t.Errorf("synchronous=%q: %d syncs for %d commits: acknowledged commits may not be on disk\n%s", tc.env, syncs, syncCommits, summary)
		}
		if !tc.atLeast && syncs >= syncCommits {
			t.Errorf("synchronous=NORMAL: %d syncs for %d commits, as many as FULL: the trace does not tell them apart\n%s", syncs, syncCommits, summary)
		}
	}
}
