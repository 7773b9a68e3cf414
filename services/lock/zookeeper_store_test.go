package lock_test

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/zklock"
)

// zookeeperStore gives the test its own root on the shared ZooKeeper; every open is one more
// backend with its own session, as another service instance would have.
func zookeeperStore(t *testing.T) func(t *testing.T) lock.Backend {
	root := zkTestRoot(t, testenv.ZooKeeperAddrs())
	return func(t *testing.T) lock.Backend {
		return openZK(t, testenv.ZooKeeperAddrs(), zklock.Config{Root: root})
	}
}

// openZK opens a zookeeper backend on servers, closed when the test ends. Logs are dropped:
// reconnect attempts after a fault would drown the test output.
func openZK(t *testing.T, servers []string, cfg zklock.Config) *zklock.Backend {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := zklock.Open(ctx, servers, cfg)
	if err != nil {
		t.Fatalf("zklock.Open(%v): %v; start the dev backends with deploy/dev/backends.sh up", servers, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

var nodeUnsafe = regexp.MustCompile(`[^A-Za-z0-9_:-]`)

// zkTestRoot returns a root node unique to the test and deletes it, with everything below,
// when the test ends (after the backends it registered later have closed).
func zkTestRoot(t *testing.T, servers []string) string {
	t.Helper()
	root := "/coordkit-test/" + nodeUnsafe.ReplaceAllString(testenv.Prefix(t), "_")
	t.Cleanup(func() {
		conn, _, err := zk.Connect(servers, 5*time.Second, zk.WithLogger(discardZK{}))
		if err != nil {
			t.Logf("clean %s: %v", root, err)
			return
		}
		defer conn.Close()
		if err := deleteTree(conn, root); err != nil {
			t.Logf("clean %s: %v", root, err)
		}
	})
	return root
}

func deleteTree(conn *zk.Conn, path string) error {
	kids, _, err := conn.Children(path)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kids {
		if err := deleteTree(conn, path+"/"+k); err != nil {
			return err
		}
	}
	if err := conn.Delete(path, -1); err != nil && err != zk.ErrNoNode {
		return err
	}
	return nil
}

type discardZK struct{}

func (discardZK) Printf(string, ...any) {}
