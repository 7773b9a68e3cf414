package idgen_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/idgen"
)

// storeCase is one SQL store under test; open returns the StoreConfig of a fresh, isolated
// store that several instances share, as several processes would.
type storeCase struct {
	name string
	open func(t *testing.T) idgen.StoreConfig
}

var stores = []storeCase{
	{name: "mysql", open: func(t *testing.T) idgen.StoreConfig {
		return idgen.StoreConfig{MySQLDSN: testenv.MySQLDSN()}
	}},
	{name: "sqlite", open: func(t *testing.T) idgen.StoreConfig {
		return idgen.StoreConfig{SQLitePath: filepath.Join(t.TempDir(), "idgen.db")}
	}},
}

// withRedis adds the test Redis, under a key prefix of this test, to cfg.
func withRedis(t testing.TB, cfg idgen.StoreConfig) idgen.StoreConfig {
	rdb := testenv.Redis(t, "")
	prefix := testenv.Prefix(t) + ":"
	testenv.CleanRedis(t, rdb, prefix)
	cfg.Redis, cfg.RedisPrefix = rdb, prefix
	return cfg
}

// instance is one running ID service with a client for it.
type instance struct {
	url    string
	client idgenv1connect.IdServiceClient
	// stop shuts the service down as SIGTERM would and closes its engines; later calls
	// return the first result.
	stop func() error
}

// startInstance opens the ID service on cfg and serves it through the real server bootstrap
// on a loopback port, as `coord serve` does, until stop or the end of the test.
func startInstance(t testing.TB, cfg idgen.StoreConfig) *instance {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := server.New(server.Config{Logger: logger})
	cfg.Registerer, cfg.Logger = srv.Registry(), logger
	svc, err := idgen.OpenService(context.Background(), cfg)
	if err != nil {
		t.Fatalf("idgen.OpenService: %v", err)
	}
	srv.Handle(idgenv1connect.NewIdServiceHandler(svc, srv.HandlerOptions()...))
	url, stopServer := testenv.Serve(t, srv)
	stop := sync.OnceValue(func() error {
		return errors.Join(stopServer(), svc.Close())
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &instance{url: url, client: idgenv1connect.NewIdServiceClient(client.DefaultHTTPClient(), url), stop: stop}
}

// wantCode fails unless err carries the Connect code want and its message starts with the
// field it is about.
func wantCode(t *testing.T, err error, want connect.Code, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v naming %q", want, field)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), field+":") {
		t.Fatalf("error %v does not start with the field %q", err, field)
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}
