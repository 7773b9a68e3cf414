// Command stalewriter is the flash-sale buyer that gets paused while it holds the lock. It
// runs under `coord lock run`, which gives it the lease's fencing token in
// $COORDKIT_FENCING_TOKEN. It reads the stock, reports "pid token qty" in DIR/held, waits
// for DIR/go (the test pauses the whole process group meanwhile, past the lease), then sells
// one item with the guarded write and reports the rows it changed in DIR/result.
//
// It ignores SIGTERM: `coord lock run` sends it one the moment it finds the lease lost, but a
// process resuming from a pause is already past its checks with the write under way; only
// the store's fencing check can stop that write.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coordkit/coordkit/libs/sqldb"
)

func main() {
	dsn := flag.String("dsn", "", "MariaDB DSN")
	stock := flag.String("stock", "", "stock table")
	orders := flag.String("orders", "", "orders table")
	item := flag.String("item", "", "the item")
	dir := flag.String("dir", "", "directory of the held, go and result files")
	flag.Parse()
	signal.Ignore(syscall.SIGTERM)

	token, err := strconv.ParseUint(os.Getenv("COORDKIT_FENCING_TOKEN"), 10, 64)
	if err != nil {
		log.Fatalf("stalewriter: COORDKIT_FENCING_TOKEN: %v", err)
	}
	ctx := context.Background()
	db, err := sqldb.OpenMySQL(ctx, *dsn, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	var qty int
	if err := db.QueryRow("SELECT qty FROM "+*stock+" WHERE item = ?", *item).Scan(&qty); err != nil {
		log.Fatal(err)
	}
	report(*dir, "held", fmt.Sprintf("%d %d %d", os.Getpid(), token, qty))
	for !exists(filepath.Join(*dir, "go")) {
		time.Sleep(10 * time.Millisecond)
	}
	n, err := sell(db.DB, *stock, *orders, *item, token)
	if err != nil {
		log.Fatal(err)
	}
	report(*dir, "result", strconv.FormatInt(n, 10))
}

// sell is the buyers' guarded write: one item, only while no later token has written and
// stock is left, with the order in the same transaction. It returns the stock rows changed.
func sell(db *sql.DB, stock, orders, item string, token uint64) (int64, error) {
	tx, err := db.Begin()
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	res, err := tx.Exec("UPDATE "+stock+" SET qty = qty - 1, last_token = ? WHERE item = ? AND last_token < ? AND qty > 0", token, item, token)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return n, err
	}
	if _, err := tx.Exec("INSERT INTO "+orders+" (buyer, item, token, qty_after) SELECT 'stale-holder', item, ?, qty FROM "+stock+" WHERE item = ?", token, item); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// report writes name in dir atomically, so the test never reads half of it.
func report(dir, name, content string) {
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		log.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
