package sqltask

import (
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"time"

	"github.com/coordkit/coordkit/services/taskpick"
)

// expiredMsg is the last_error of a task whose last attempt's lease ran out.
const expiredMsg = "lease expired on the last attempt (worker crashed or hung)"

// uniquePurgeLimit bounds the unique keys one sweep visits (purgeUnique), and
// uniquePurgeEvery how often a backend visits them: free keys only cost storage, so they need
// not take a turn of SQLite's one connection at every sweep.
const (
	uniquePurgeLimit = 200
	uniquePurgeEvery = time.Second
)

// uniquePurgeDue reports whether this sweep visits unique keys, and if so starts the next
// period.
func (b *Backend) uniquePurgeDue() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := time.Now(); now.Sub(b.uniquePurged) >= uniquePurgeEvery {
		b.uniquePurged = now
		return true
	}
	return false
}

// Sweep implements taskpick.Backend: a transaction locks up to limit leases that ended
// (skipping rows another sweeper or picker holds) and returns them to available, or dead on
// their last attempt; then done tasks past the retention are deleted.
func (b *Backend) Sweep(ctx context.Context, limit int) ([]taskpick.Recovered, error) {
	byPool := map[string]*taskpick.Recovered{}
	var order []string
	err := b.tx(ctx, func(tx *sql.Tx) error {
		clear(byPool)
		order = order[:0]
		rows, err := tx.QueryContext(ctx, "SELECT seq, pool, attempt >= max_attempts, "+b.d.NowMillis+" FROM "+table+
			" WHERE state = "+strconv.Itoa(stLeased)+" AND run_at <= "+b.d.NowMillis+" ORDER BY run_at LIMIT ?"+b.d.SkipLocked, limit)
		if err != nil {
			return err
		}
		var back, dead []any
		var now int64
		for rows.Next() {
			var seq int64
			var pool string
			var last bool
			if err := rows.Scan(&seq, &pool, &last, &now); err != nil {
				rows.Close()
				return err
			}
			r := byPool[pool]
			if r == nil {
				r = &taskpick.Recovered{Pool: pool}
				byPool[pool] = r
				order = append(order, pool)
			}
			if last {
				dead = append(dead, seq)
				r.Dead++
			} else {
				back = append(back, seq)
				r.Available++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(back) > 0 {
			if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET state = "+strconv.Itoa(stAvailable)+
				", recoveries = recoveries + 1, run_at = ?, rnd = "+b.randomExpr()+
				" WHERE seq IN ("+placeholders(len(back))+")", append([]any{now}, back...)...); err != nil {
				return err
			}
		}
		if len(dead) > 0 {
			if _, err := tx.ExecContext(ctx, "UPDATE "+table+" SET state = "+strconv.Itoa(stDead)+
				", recoveries = recoveries + 1, run_at = ?, last_error = ? WHERE seq IN ("+placeholders(len(dead))+")",
				append([]any{now, b.errorText(expiredMsg)}, dead...)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, b.fail(ctx, err)
	}
	if b.cfg.Retention > 0 {
		if err := b.purgeDone(ctx, limit); err != nil {
			return nil, b.fail(ctx, err)
		}
	}
	if b.uniquePurgeDue() {
		// Free key rows only take room; their purge failing must not hide the recoveries
		// committed above from the caller, which announces them.
		if err := b.purgeUnique(ctx, min(limit, uniquePurgeLimit)); err != nil {
			slog.WarnContext(ctx, "sqltask: purging free unique keys failed; they stay until a later sweep", "backend", b.d.Name, "error", err)
		}
	}
	out := make([]taskpick.Recovered, 0, len(order))
	for _, p := range order {
		out = append(out, *byPool[p])
	}
	return out, nil
}

// purgeDone deletes up to limit done or cancelled tasks whose retention passed.
func (b *Backend) purgeDone(ctx context.Context, limit int) error {
	cond := " WHERE state IN (" + strconv.Itoa(stDone) + ", " + strconv.Itoa(stCancelled) + ") AND run_at <= " + b.d.NowMillis
	q := "DELETE FROM " + table + cond + " LIMIT ?"
	if b.d.Name != "mysql" { // SQLite has DELETE … LIMIT only as a compile-time option, PostgreSQL not at all
		q = "DELETE FROM " + table + " WHERE seq IN (SELECT seq FROM " + table + cond + " LIMIT ?)"
	}
	return b.d.Retry(ctx, func() error {
		_, err := b.db.ExecContext(ctx, q, limit)
		return err
	})
}

// randomExpr draws a new random position per row.
func (b *Backend) randomExpr() string {
	switch b.d.Name {
	case "sqlite":
		return "(random() & 4294967295)"
	case "postgres":
		return "FLOOR(random() * 4294967296)::BIGINT"
	}
	return "FLOOR(RAND() * 4294967296)"
}
