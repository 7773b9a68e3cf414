package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

const (
	saleItem   = "item-1"
	saleStock  = 50
	saleBuyers = 200
	saleTTL    = 3 * time.Second
)

// TestFlashSale is the seed's flash sale (one item left, two users on two servers) at scale:
// 200 buyers on 3 coord instances that share a lock backend and NATS compete for 50 items.
// Each buyer locks the item, reads the stock and sells one with a write the store guards
// with the lock's fencing token. It attacks mutual exclusion across instances and the
// fencing token under two faults in the same sale: an instance is killed with SIGKILL (its
// buyers retry elsewhere, idempotently) and a real holder process is paused past its lease
// (SIGSTOP stops its watchdog too, like a GC pause) and writes after others have bought: the
// store must refuse that write. Exactly 50 are sold, tokens rise in commit order.
func TestFlashSale(t *testing.T) {
	t.Parallel()
	// Not sqlite: its file is embedded in each instance, so instances never share its locks.
	for _, backend := range []string{"redis", "redlock", "zookeeper", "mysql", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			runFlashSale(t, backend)
		})
	}
}

func runFlashSale(t *testing.T, backend string) {
	ins := startCluster(t, 3, backendArgs(t, backend)...)
	db := scenarioDB(t)
	tables := scenarioTables(t, db, "flashsale", "stock", "orders")
	s := &sale{backend: backend, key: testenv.Prefix(t) + ":" + saleItem, db: db, stock: tables[0], orders: tables[1]}
	mustExec(t, db,
		"CREATE TABLE "+s.stock+" (item VARCHAR(64) PRIMARY KEY, qty INT NOT NULL, last_token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
		// No unique key on token and qty_after may go negative: the checks must see a failure,
		// not have the schema turn it into a buyer's error.
		"CREATE TABLE "+s.orders+" (seq BIGINT AUTO_INCREMENT PRIMARY KEY, buyer VARCHAR(64) NOT NULL UNIQUE, item VARCHAR(64) NOT NULL, token BIGINT UNSIGNED NOT NULL, qty_after INT NOT NULL) ENGINE=InnoDB",
		fmt.Sprintf("INSERT INTO %s VALUES ('%s', %d, 0)", s.stock, saleItem, saleStock))
	for _, in := range ins {
		s.clients = append(s.clients, in.Client())
	}

	paused := holdAndPause(t, s, ins[0]) // holds the lock with token T, frozen, before the sale
	s.pausedToken, s.pausedUntil = paused.token, paused.heldUntil

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	errs := make(chan error, saleBuyers)
	for b := range saleBuyers {
		wg.Go(func() {
			if err := s.buyer(ctx, b); err != nil {
				errs <- err
			}
		})
	}

	// The faults, as the sale goes: the paused holder wakes after others bought with later
	// tokens; then the third instance dies with buyers waiting on it.
	pollUntil(t, 45*time.Second, "5 sales after the paused holder's lease ended", func() bool { return s.sold() >= 5 })
	staleRows := paused.resume(t)
	pollUntil(t, 45*time.Second, "20 sales", func() bool { return s.sold() >= 20 })
	ins[2].Stop() // SIGKILL
	killedAt := s.sold()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, o := range s.overlaps {
		t.Errorf("two holders at once: %s", o)
	}

	if staleRows != 0 {
		t.Errorf("the paused holder's write with token %d changed %d rows after later tokens had written; want 0 (refused)", paused.token, staleRows)
	}
	if killedAt >= saleStock || s.retries.Load() == 0 {
		t.Errorf("the instance was killed after %d sales and %d buyers retried: the fault missed the sale", killedAt, s.retries.Load())
	}
	s.check(t, paused.token)
	t.Logf("%s: sold %d of %d to %d buyers; %d retries (instance killed after %d sales); stale write of the paused holder (token %d) refused: %d rows; %d refused writes of lost leases",
		backend, s.sold(), saleStock, saleBuyers, s.retries.Load(), killedAt, paused.token, staleRows, s.refused.Load())
}

// errSoldOut ends a buyer who found no stock.
var errSoldOut = errors.New("sold out")

// sale is one flash sale: the item's lock and the shop's tables.
type sale struct {
	backend, key  string
	db            *sql.DB
	stock, orders string
	clients       []*client.Client

	retries atomic.Int64 // attempts that failed and were made again
	refused atomic.Int64 // guarded writes refused because a later token had written

	// The paused holder's token and a lower bound of its lease's promised expiry.
	pausedToken uint64
	pausedUntil time.Time

	mu       sync.Mutex
	holder   *client.Lock // the buyer inside the critical section, if any
	overlaps []string
}

// buyer buys one item, moving to the next instance after any failure (its instance killed,
// a lease lost). Its order id (the buyer) makes a retry after a lost answer harmless.
func (s *sale) buyer(ctx context.Context, b int) error {
	buyer := fmt.Sprintf("buyer-%d", b)
	for attempt := 0; ; attempt++ {
		err := s.buy(ctx, s.clients[(b+attempt)%len(s.clients)], buyer)
		if err == nil || errors.Is(err, errSoldOut) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s gave up after %d attempts: %w", buyer, attempt+1, err)
		}
		s.retries.Add(1)
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
}

// buy is one attempt: lock, check the stock, sell one with the token-guarded write, unlock.
func (s *sale) buy(ctx context.Context, c *client.Client, buyer string) error {
	if err := s.inStock(ctx); err != nil { // every shop's cheap pre-check; the lock makes it exact
		return err
	}
	l, err := c.Lock(ctx, s.key, client.WithLockBackend(s.backend), client.WithTTL(saleTTL), client.WithWait(30*time.Second))
	if err != nil {
		return err
	}
	s.enter(l)
	defer func() {
		s.leave(l)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		l.Unlock(uctx) //nolint:errcheck // when its instance was killed the lease ends at its ttl
	}()
	if err := s.inStock(ctx); err != nil {
		return err
	}
	time.Sleep(5 * time.Millisecond) // between check and write: where the seed's second user slips in
	return s.sell(ctx, buyer, l.FencingToken())
}

// inStock is nil while stock is left, else errSoldOut or the database's error.
func (s *sale) inStock(ctx context.Context) error {
	var qty int
	if err := s.db.QueryRowContext(ctx, "SELECT qty FROM "+s.stock+" WHERE item = ?", saleItem).Scan(&qty); err != nil {
		return err
	}
	if qty <= 0 {
		return errSoldOut
	}
	return nil
}

// sell records buyer's order and takes one item, in one transaction, unless a token at or
// above token has written (then the lease was lost: an error, to retry) or no stock is left.
func (s *sale) sell(ctx context.Context, buyer string, token uint64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	res, err := tx.ExecContext(ctx, "INSERT IGNORE INTO "+s.orders+" (buyer, item, token, qty_after) VALUES (?, ?, ?, 0)", buyer, saleItem, token)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // bought already: an earlier attempt committed, its answer was lost
	}
	res, err = tx.ExecContext(ctx, "UPDATE "+s.stock+" SET qty = qty - 1, last_token = ? WHERE item = ? AND last_token < ? AND qty > 0", token, saleItem, token)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		var last uint64
		if err := tx.QueryRowContext(ctx, "SELECT last_token FROM "+s.stock+" WHERE item = ?", saleItem).Scan(&last); err != nil {
			return err
		}
		if last >= token {
			s.refused.Add(1)
			return fmt.Errorf("%s: write with token %d refused, token %d has written", buyer, token, last)
		}
		return errSoldOut
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.orders+" SET qty_after = (SELECT qty FROM "+s.stock+" WHERE item = ?) WHERE buyer = ?", saleItem, buyer); err != nil {
		return err
	}
	return tx.Commit()
}

// enter records l as the holder inside the critical section. Another holder whose lease the
// service still vouches for (its reported expiry, which must never be later than the backend
// lets go, is still ahead) means the lock gave the item to two buyers at once.
func (s *sale) enter(l *client.Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Before(s.pausedUntil) {
		s.overlaps = append(s.overlaps, fmt.Sprintf("token %d acquired %v before the paused holder's lease (token %d, %v) could end",
			l.FencingToken(), s.pausedUntil.Sub(now).Round(time.Millisecond), s.pausedToken, pausedTTL))
	}
	if h := s.holder; h != nil && time.Now().Before(h.ExpiresAt()) {
		s.overlaps = append(s.overlaps, fmt.Sprintf("token %d acquired while token %d's lease runs until %s",
			l.FencingToken(), h.FencingToken(), h.ExpiresAt().Format(time.StampMicro)))
	}
	s.holder = l
}

func (s *sale) leave(l *client.Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder == l {
		s.holder = nil
	}
}

func (s *sale) sold() int64 { return queryInt(s.db, "SELECT COUNT(*) FROM "+s.orders) }

// check reads the shop after the sale: exactly the stock sold, each unit once, never below
// zero, tokens rising in commit order, none at or below the paused holder's.
func (s *sale) check(t *testing.T, staleToken uint64) {
	t.Helper()
	var qty int
	var last uint64
	if err := s.db.QueryRow("SELECT qty, last_token FROM "+s.stock+" WHERE item = ?", saleItem).Scan(&qty, &last); err != nil {
		t.Fatal(err)
	}
	// Commit order is the order of the stock row's decrements, which its row lock serializes:
	// qty_after descending (an AUTO_INCREMENT seq is taken at INSERT, before the guarded
	// write, so it can differ from it). A qty_after seen twice breaks the count check below.
	rows, err := s.db.Query("SELECT buyer, token, qty_after FROM " + s.orders + " ORDER BY qty_after DESC, seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int
	var prev uint64
	for ; rows.Next(); n++ {
		var buyer string
		var token uint64
		var after int
		if err := rows.Scan(&buyer, &token, &after); err != nil {
			t.Fatal(err)
		}
		if token <= prev || token <= staleToken {
			t.Errorf("order %d (%s) has token %d after token %d (paused holder's %d): want tokens rising in commit order", n+1, buyer, token, prev, staleToken)
		}
		if want := saleStock - 1 - n; after != want {
			t.Errorf("order %d (%s) left %d in stock, want %d: each unit sold once, never below zero", n+1, buyer, after, want)
		}
		prev = token
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != saleStock || qty != 0 || last != prev {
		t.Errorf("after the sale: %d orders, stock %d, last token %d (last order's %d); want %d orders, stock 0, equal tokens", n, qty, last, prev, saleStock)
	}
}
