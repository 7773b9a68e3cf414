package lock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

// startExampleService runs a lock service on the embedded SQLite backend, as `coord serve`
// does with no flags, and returns its URL and a stop function.
func startExampleService() (string, func()) {
	dir, _ := os.MkdirTemp("", "coordkit-example")
	ctx, cancel := context.WithCancel(context.Background())
	b, err := sqllock.OpenSQLite(ctx, filepath.Join(dir, "locks.db"))
	if err != nil {
		panic(err)
	}
	srv := server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	svc, err := lock.NewService(lock.Config{Backends: map[string]lock.Backend{"sqlite": b}})
	if err != nil {
		panic(err)
	}
	srv.Handle(lockv1connect.NewLockServiceHandler(svc, srv.HandlerOptions()...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	return "http://" + ln.Addr().String(), func() {
		cancel()
		<-done
		b.Close()
		os.RemoveAll(dir)
	}
}

// The seeds' flash sale: 3 items in stock, 10 buyers on several app instances. Each buyer
// checks and decrements the stock under the lock on the item, so nobody sells an item that is
// gone. The stock store remembers the highest fencing token it accepted and refuses older
// ones, so even a holder whose lease expired mid-write could not corrupt it.
func Example_flashSale() {
	url, stop := startExampleService()
	defer stop()
	c := client.New(url)
	ctx := context.Background()

	var (
		mu        sync.Mutex // guards the stand-in for the inventory database below
		stock     = 3
		lastToken uint64
		sold      int
	)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			l, err := c.Lock(ctx, "sku:iphone", client.WithTTL(5*time.Second), client.WithWait(10*time.Second))
			if err != nil {
				fmt.Println("lock:", err)
				return
			}
			defer l.Unlock(ctx)

			mu.Lock()
			defer mu.Unlock()
			if l.FencingToken() <= lastToken { // the guarded write rejects stale holders
				return
			}
			lastToken = l.FencingToken()
			if stock > 0 {
				stock--
				sold++
			}
		})
	}
	wg.Wait()
	fmt.Printf("sold %d, stock left %d\n", sold, stock)
	// Output: sold 3, stock left 0
}

// Re-entry: the same owner may take a lock it holds again; it is free once every hold is
// released.
func ExampleClient_TryLock_reentrant() {
	url, stop := startExampleService()
	defer stop()
	c := client.New(url)
	ctx := context.Background()

	outer, _ := c.TryLock(ctx, "report:daily")
	inner, _ := c.TryLock(ctx, "report:daily", client.WithOwner(outer.Owner()))
	fmt.Println("hold count:", inner.HoldCount(), "same token:", inner.FencingToken() == outer.FencingToken())

	_, err := c.TryLock(ctx, "report:daily")
	fmt.Println("someone else:", err)

	inner.Unlock(ctx)
	outer.Unlock(ctx)
	again, _ := c.TryLock(ctx, "report:daily")
	fmt.Println("after both unlocks, token:", again.FencingToken())
	again.Unlock(ctx)
	// Output:
	// hold count: 2 same token: true
	// someone else: client: lock not acquired
	// after both unlocks, token: 2
}
