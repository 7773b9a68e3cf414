package lock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/sqldb"
	"github.com/coordkit/coordkit/services/lock"
	"github.com/coordkit/coordkit/services/lock/sqllock"
)

// startExampleService runs n lock service instances on one embedded SQLite lock store (n `coord
// serve` processes sharing a data dir, the default with no flags) and returns their URLs and a
// stop function. Examples take no *testing.T, so this is testenv.Serve by hand.
func startExampleService(n int) ([]string, func()) {
	dir, err := os.MkdirTemp("", "coordkit-example")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		urls  []string
		wg    sync.WaitGroup
		backs []lock.Backend
	)
	for range n {
		b, err := sqllock.OpenSQLite(ctx, filepath.Join(dir, "locks.db"), sqllock.Config{})
		if err != nil {
			panic(err)
		}
		backs = append(backs, b)
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
		wg.Go(func() { srv.Serve(ctx, ln) })
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, func() {
		cancel()
		wg.Wait()
		for _, b := range backs {
			b.Close()
		}
		os.RemoveAll(dir)
	}
}

// errStaleToken is the shop's refusal of a write whose fencing token is not newer than the
// last one it accepted.
var errStaleToken = errors.New("shop: stale fencing token")

// shop is the flash sale's inventory database: a row per SKU with the stock left and the
// highest fencing token a write carried. Selling is deliberately a read, a slow moment and a
// write back, as in the classic flash-sale scenario, so two buyers inside at once both sell the same item: only the
// lock keeps them apart. The write itself is the guarded write: it refuses a token older than
// the last accepted, so a holder whose lease ran out mid-sale cannot overwrite its successor.
type shop struct{ db *sql.DB }

// openShop opens the shop database at path, as one more app instance would.
func openShop(ctx context.Context, path string) *shop {
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		panic(err)
	}
	return &shop{db: db.DB}
}

func (s *shop) stock(ctx context.Context, sku string) (int, error) {
	var qty int
	err := s.db.QueryRowContext(ctx, `SELECT qty FROM stock WHERE sku = ?`, sku).Scan(&qty)
	return qty, err
}

func (s *shop) setStock(ctx context.Context, sku string, qty int, token uint64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE stock SET qty = ?, fence = ? WHERE sku = ? AND fence < ?`,
		qty, int64(token), sku, int64(token))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n == 0 {
		err = errStaleToken
	}
	return err
}

// sku is the item on sale; the lock is on its key.
const sku = "sku:iphone"

// buy sells one iphone if any is left: under the lock, check the stock, take a moment (the
// payment, the risk check), write the new stock with the lock's fencing token.
func buy(ctx context.Context, c *client.Client, s *shop) (string, error) {
	l, err := c.Lock(ctx, sku, client.WithTTL(10*time.Second), client.WithWait(time.Minute))
	if err != nil {
		return "", err
	}
	defer l.Unlock(ctx)
	// l.Context() ends the moment the watchdog cannot confirm the lease.
	qty, err := s.stock(l.Context(), sku)
	if err != nil || qty == 0 {
		return "sold out", err
	}
	time.Sleep(50 * time.Millisecond) // a second buyer in here would sell the same item
	if err := s.setStock(l.Context(), sku, qty-1, l.FencingToken()); err != nil {
		return "", err
	}
	return "order", nil
}

// The classic flash sale: 3 iphones in stock, 10 buyers on two app instances, each talking to
// its own lock service instance (one over Connect, one over gRPC) and its own connection to
// the inventory database. Selling reads the stock and writes it back a moment later, so
// without the lock several buyers would read the same stock and sell one iphone several
// times; with it, exactly 3 orders go through. The inventory also checks each write's
// fencing token, refusing a write from an earlier holder.
func Example_flashSale() {
	urls, stop := startExampleService(2)
	defer stop()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "coordkit-shop")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	dbPath := filepath.Join(dir, "shop.db")
	apps := []struct {
		c *client.Client
		s *shop
	}{
		{client.New(urls[0]), openShop(ctx, dbPath)},
		{grpcClient(urls[1]), openShop(ctx, dbPath)},
	}
	for _, app := range apps {
		defer app.s.db.Close()
	}
	if _, err := apps[0].s.db.ExecContext(ctx, `CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL, fence INTEGER NOT NULL);
		INSERT INTO stock VALUES (?, 3, 0)`, sku); err != nil {
		panic(err)
	}

	results := make(chan string, 10)
	var wg sync.WaitGroup
	for i := range 10 {
		app := apps[i%len(apps)]
		wg.Go(func() {
			res, err := buy(ctx, app.c, app.s)
			if err != nil {
				res = "error: " + err.Error()
			}
			results <- res
		})
	}
	wg.Wait()
	close(results)
	tally := map[string]int{}
	for res := range results {
		tally[res]++
	}
	fmt.Println("orders:", tally["order"], "sold out:", tally["sold out"])
	for res, n := range tally {
		if res != "order" && res != "sold out" {
			fmt.Println(n, "x", res)
		}
	}
	left, _ := apps[1].s.stock(ctx, sku)
	fmt.Println("stock left:", left)
	fmt.Println("a write with an older token:", apps[1].s.setStock(ctx, sku, 3, 1))
	// Output:
	// orders: 3 sold out: 7
	// stock left: 0
	// a write with an older token: shop: stale fencing token
}

// Re-entry: the same owner may take a lock it holds again; it is free once every hold is
// released.
func ExampleClient_TryLock_reentrant() {
	urls, stop := startExampleService(1)
	defer stop()
	c := client.New(urls[0])
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
