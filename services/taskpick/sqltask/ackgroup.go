package sqltask

import (
	"context"
	"runtime"
	"strconv"
	"sync"

	"github.com/coordkit/coordkit/services/taskpick"
)

// On PostgreSQL the Acks that arrive while one is running are sent together as one
// statement, one commit: a commit waits for its write-ahead log to reach the disk, and one
// commit per Ack was most of what an Ack cost. Each Ack still finishes only its own lease:
// the statement's WHERE is leaseCheck's for every (pool, id, token, digest) it carries, and
// an Ack is answered done only for a row the statement finished under its lease, each row
// answering one Ack (two racing Acks of one lease in one statement: one is done, the other
// finds the task gone, as it would one after the other). Nothing waits for a group to fill:
// an Ack with none running runs at once, alone.

// ackCall is one Ack waiting for its group's statement.
type ackCall struct {
	pool, id string
	lease    taskpick.Lease
	// done gets whether the statement finished this Ack's lease, or its failure.
	done chan ackDone
}

type ackDone struct {
	finished bool
	err      error
}

// ackGroup holds the Acks waiting for the statement after the running one.
type ackGroup struct {
	mu      sync.Mutex
	pending []*ackCall
	running bool
}

// ackStatement finishes the leases given as four arrays (pools, ids, tokens, digests) in
// one statement and returns the rows it finished.
func (b *Backend) ackStatement() string {
	now := b.d.NowMillis
	from := " unnest(?::text[], ?::text[], ?::bigint[], ?::text[]) AS a(pool, id, token, digest)"
	where := " WHERE t.pool = a.pool AND t.id = a.id AND t.state = " + strconv.Itoa(stLeased) +
		" AND t.token = a.token AND t.lease_hash = a.digest AND t.lease_hash <> '' AND t.run_at > " + now +
		" RETURNING t.pool, t.id, t.token, t.lease_hash"
	if b.cfg.Retention > 0 {
		return "UPDATE " + table + " t SET state = " + strconv.Itoa(stDone) + ", run_at = " + now + " + " +
			strconv.FormatInt(b.cfg.Retention.Milliseconds(), 10) + " FROM" + from + where
	}
	return "DELETE FROM " + table + " t USING" + from + where
}

// ackGrouped is Ack on PostgreSQL: the call joins the group of Acks the next statement
// runs, or runs it when none is running.
func (b *Backend) ackGrouped(ctx context.Context, pool, id string, lease taskpick.Lease) error {
	c := &ackCall{pool: pool, id: id, lease: lease, done: make(chan ackDone, 1)}
	g := &b.acks
	g.mu.Lock()
	g.pending = append(g.pending, c)
	lead := !g.running
	g.running = true
	g.mu.Unlock()
	if lead {
		// The Acks of one Batch request arrive together: let those already running join
		// this statement rather than wait for the next.
		runtime.Gosched()
		b.runAckGroup(context.WithoutCancel(ctx))
	}
	var d ackDone
	select {
	case d = <-c.done:
	case <-ctx.Done():
		return b.fail(ctx, context.Cause(ctx))
	}
	if d.err != nil {
		return b.fail(ctx, d.err)
	}
	if d.finished {
		return nil
	}
	if _, err := b.lookup(ctx, pool, id); err != nil {
		return err
	}
	return taskpick.ErrStaleLease
}

// runAckGroup runs the pending Acks as one statement, then hands what arrived meanwhile
// to a goroutine of its own, so that no caller keeps running the statements of others.
func (b *Backend) runAckGroup(ctx context.Context) {
	g := &b.acks
	g.mu.Lock()
	calls := g.pending
	g.pending = nil
	g.mu.Unlock()
	b.finishAcks(ctx, calls)
	g.mu.Lock()
	more := len(g.pending) > 0
	g.running = more
	g.mu.Unlock()
	if more {
		go b.runAckGroup(ctx)
	}
}

// finishAcks runs calls' statement and answers each call.
func (b *Backend) finishAcks(ctx context.Context, calls []*ackCall) {
	pools, ids, tokens, digests := make([]string, len(calls)), make([]string, len(calls)), make([]int64, len(calls)), make([]string, len(calls))
	for i, c := range calls {
		pools[i], ids[i], tokens[i], digests[i] = c.pool, c.id, int64(storedToken(c.lease.Token)), c.lease.Digest
	}
	type leaseKey struct {
		pool, id string
		token    uint64
		digest   string
	}
	finished := map[leaseKey]int{}
	err := b.d.Retry(ctx, func() error {
		clear(finished)
		st, err := b.stmtN(ctx, b.ackStatement())
		if err != nil {
			return err
		}
		rows, err := st.QueryContext(ctx, pools, ids, tokens, digests)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k leaseKey
			if err := rows.Scan(&k.pool, &k.id, &k.token, &k.digest); err != nil {
				return err
			}
			finished[k]++
		}
		return rows.Err()
	})
	for _, c := range calls {
		if err != nil {
			c.done <- ackDone{err: err}
			continue
		}
		k := leaseKey{c.pool, c.id, c.lease.Token, c.lease.Digest}
		ok := finished[k] > 0
		if ok {
			finished[k]--
		}
		c.done <- ackDone{finished: ok}
	}
}
