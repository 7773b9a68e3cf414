package sqldb

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSQLiteFileModes opens a database in a directory that does not exist yet, writes to it
// (so SQLite creates its -wal and -shm files) and checks that nobody but the owner can read
// any of it: directories 0700, files 0600, whatever the umask lets through.
func TestSQLiteFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested")
	path := filepath.Join(dir, "locks.db")
	db := openAndWrite(t, path)
	defer db.Close()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		wantMode(t, d, DirMode)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		wantMode(t, f, FileMode)
	}
}

// TestSQLiteLooseModesOfOlderVersions opens a database an older version left readable by
// everyone (0644 files in a 0755 directory): the files are narrowed to 0600 and said so, the
// directory, which may be shared, is left as it is with a warning.
func TestSQLiteLooseModesOfOlderVersions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, "locks.db")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // past the umask
		t.Fatal(err)
	}
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	old := openAndWrite(t, path)
	old.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.WriteFile(f, nil, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	db := openAndWrite(t, path)
	defer db.Close()
	wantMode(t, path, FileMode)
	for _, f := range []string{path + "-wal", path + "-shm"} {
		if _, err := os.Stat(f); err == nil {
			wantMode(t, f, FileMode)
		}
	}
	wantMode(t, dir, 0o755)
	for _, want := range []string{"restricted a SQLite file", "other users can enter the SQLite data directory"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("no warning %q in the log:\n%s", want, logs.String())
		}
	}
}

func openAndWrite(t *testing.T, path string) *DB {
	t.Helper()
	db, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatalf("OpenSQLite: %v", err)
	}
	for _, q := range []string{"CREATE TABLE IF NOT EXISTS t (v TEXT)", "INSERT INTO t VALUES ('x')"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return db
}

func wantMode(t *testing.T, name string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(name)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Fatalf("%s has mode %v, want %v", name, got, want)
	}
}
