package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/sqldb"
)

// fakeBackend is a backend of the test lists; its name is what Open was given.
type fakeBackend struct{ name string }

// fakeConfig enables the backends it names and fails the one named in fail.
type fakeConfig struct {
	enabled []string
	fail    string
}

// fakeList is a backend list of three whose opens and closes are recorded in log.
func fakeList(log *[]string) []service.Backend[*fakeBackend, fakeConfig] {
	var out []service.Backend[*fakeBackend, fakeConfig]
	for _, name := range []string{"a", "b", "c"} {
		out = append(out, service.Backend[*fakeBackend, fakeConfig]{
			Name: name, Flag: "--" + name + "-addr",
			Open: func(_ context.Context, _ service.Deps, cfg fakeConfig) (*fakeBackend, func() error, error) {
				if cfg.fail == name {
					return nil, nil, errors.New("refused")
				}
				if !slices.Contains(cfg.enabled, name) {
					return nil, nil, nil
				}
				*log = append(*log, "open "+name)
				return &fakeBackend{name}, func() error { *log = append(*log, "close "+name); return nil }, nil
			},
		})
	}
	return out
}

func TestOpenBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("enabled ones, closed last opened first", func(t *testing.T) {
		t.Parallel()
		var log []string
		var closers service.Closers
		got, err := service.OpenBackends(ctx, service.Deps{}, fakeConfig{enabled: []string{"c", "a"}}, fakeList(&log), &closers)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got["a"].name != "a" || got["c"].name != "c" {
			t.Fatalf("opened %v, want a and c", got)
		}
		if err := closers.Close(); err != nil {
			t.Fatal(err)
		}
		if want := []string{"open a", "open c", "close c", "close a"}; !slices.Equal(log, want) {
			t.Fatalf("log %v, want %v", log, want)
		}
	})
	t.Run("an error names the flag, closers keep the opened", func(t *testing.T) {
		t.Parallel()
		var log []string
		var closers service.Closers
		_, err := service.OpenBackends(ctx, service.Deps{}, fakeConfig{enabled: []string{"a"}, fail: "b"}, fakeList(&log), &closers)
		if err == nil || !strings.HasPrefix(err.Error(), "--b-addr: refused") {
			t.Fatalf("error %v, want one starting with --b-addr", err)
		}
		closers.Close()
		if want := []string{"open a", "close a"}; !slices.Equal(log, want) {
			t.Fatalf("log %v, want %v", log, want)
		}
	})
	if got := service.Preference(fakeList(new([]string))); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Preference = %v, want the list order", got)
	}
}

// TestDepsOpenSQLite: the file is in DataDir and syncs as Deps says, FULL when unset.
func TestDepsOpenSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		mode sqldb.Synchronous
		want int
	}{{"", 2}, {sqldb.SyncFull, 2}, {sqldb.SyncNormal, 1}} {
		deps := service.Deps{DataDir: t.TempDir(), SQLiteSynchronous: tc.mode}
		db, err := deps.OpenSQLite(ctx, "x.db")
		if err != nil {
			t.Fatal(err)
		}
		var sync int
		if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != tc.want {
			t.Errorf("SQLiteSynchronous %q: synchronous = %d, %v; want %d", tc.mode, sync, err, tc.want)
		}
		var file string
		if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file); err != nil || file != deps.SQLitePath("x.db") {
			t.Errorf("file = %q, %v; want %q", file, err, deps.SQLitePath("x.db"))
		}
		db.Close()
	}
}
