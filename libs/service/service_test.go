package service_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/service"
)

func TestRedisClient(t *testing.T) {
	t.Parallel()
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	tests := []struct {
		name string
		in   redis.UniversalClient
		want redis.UniversalClient
	}{
		{"none", nil, nil},
		{"nil client", nilClient, nil},
		{"nil cluster client", nilCluster, nil},
		{"client", rdb, rdb},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (service.Deps{Redis: tt.in}).RedisClient(); got != tt.want {
				t.Fatalf("RedisClient() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSQLitePath(t *testing.T) {
	t.Parallel()
	if got, want := (service.Deps{DataDir: "data"}).SQLitePath("locks.db"), filepath.Join("data", "locks.db"); got != want {
		t.Fatalf("SQLitePath = %q, want %q", got, want)
	}
}

func TestClosers(t *testing.T) {
	t.Parallel()
	var order []int
	var c service.Closers
	for i := range 3 {
		c.Add(func() error {
			order = append(order, i)
			if i == 1 {
				return errors.New("close 1")
			}
			return nil
		})
	}
	errOpen := errors.New("open failed")
	err := c.Fail(errOpen)
	if !errors.Is(err, errOpen) || err.Error() != "open failed\nclose 1" {
		t.Fatalf("Fail = %q, want the open error joined with close 1", err)
	}
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Fatalf("closed in order %v, want [2 1 0]", order)
	}
	if err := c.Close(); err != nil || len(order) != 3 {
		t.Fatalf("second Close = %v and ran %d closers, want nil and none again", err, len(order)-3)
	}
}
