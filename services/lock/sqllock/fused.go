package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/coordkit/coordkit/services/lock"
)

// Fused writes (PostgreSQL, Dialect.FusedWrites). Elsewhere an uncontended Acquire, Release
// or Renew is a plain read and then a compare-and-set of the decision made on it (cas.go):
// two statements, two round trips. Here it is first tried as one UPDATE that reads, decides
// and writes: a sub-SELECT … FOR UPDATE picks the key's row only when the operation would
// write it (free, lapsed or its owner's; owned and live), locks it and reads it with the
// database clock, and the UPDATE writes the decision made on that row, returning the row as
// it was. The decision is the one the operation's transaction would make on the row it
// locks (the transaction reads the clock the same way, see sqldb.Postgres), written in the
// same statement, so it needs no compare-and-set; Release and Renew also check that the lease
// is still live at the clock the decision used, as their transaction does.
//
// A row the sub-SELECT does not pick is not locked, so a rival's attempt on a held key takes
// no row lock, as with a plain read. When the UPDATE writes nothing (held by another, not the
// owner, the hold limit, a placeholder (token 0) or no row, a lease that lapsed meanwhile),
// the operation goes on exactly as without fused writes, from a plain read; such an attempt
// costs one statement more than without them. A statement chosen as a deadlock victim
// (a lock order outside this package) applied nothing and is treated the same way.

// fusedKind is what a fused statement does.
type fusedKind int

const (
	fusedAcquire fusedKind = iota // TryAcquire: take a free or lapsed row, or re-enter
	fusedRelease                  // Release by the owner (of token, unless 0)
	fusedRenew                    // Renew by the owner (for ttlMs, or the lease's own ttl if ttlMs ≤ 0)
	fusedKinds
)

// fusedOp is one fused operation.
type fusedOp struct {
	kind   fusedKind
	key    string
	owner  string
	holder string // acquire: the holder id of a new lease
	ttlMs  int64  // acquire, renew
	token  uint64 // release: the token the caller holds, 0 for any
}

// fuse runs op's fused statement. applied says that op's decision on r, the row as it was,
// is written; otherwise nothing is, and the operation must start from a plain read.
func (b *Backend) fuse(ctx context.Context, op fusedOp) (r row, applied bool, err error) {
	st := b.st.fused[op.kind]
	var args []any
	switch op.kind {
	case fusedAcquire:
		args = []any{op.owner, op.holder, op.ttlMs, b.scope, op.key, op.owner, int64(lock.MaxHoldCount), b.scope, op.key}
	case fusedRelease:
		args = []any{b.o.keepFree.Milliseconds(), b.scope, op.key, op.owner, int64(op.token), int64(op.token), b.scope, op.key}
	case fusedRenew:
		args = []any{op.ttlMs, op.ttlMs, b.scope, op.key, op.owner, b.scope, op.key}
	default:
		return row{}, false, fmt.Errorf("sqllock: fused operation of kind %d", op.kind)
	}
	err = st.QueryRowContext(ctx, args...).Scan(&r.owner, &r.holder, &r.holds, &r.token, &r.expiresAt, &r.ttlMs, &r.now)
	switch {
	case errors.Is(err, sql.ErrNoRows), b.d.Victim(ctx, err):
		return row{}, false, nil
	case err != nil:
		return row{}, false, lock.Unavailable(ctx, b.d.Name, err)
	}
	return r, true, nil
}

// fusedSQL is the fused statement of kind (see above). It answers the row as it was, with
// the clock its decision used, when it wrote; no row otherwise. Its decisions are grant,
// Release and Renew's (lease.go): TestFusedDecidesAsPlain compares them.
func fusedSQL(d Dialect, kind fusedKind) string {
	now := d.NowMillis
	cols := "owner, holder_id, hold_count, fencing_token, expires_at, ttl_ms, " + now + " AS now"
	key := " FROM " + leasesTable + " WHERE scope = ? AND lock_key = ?"
	ret := " WHERE l.scope = ? AND l.lock_key = ?"
	switch kind {
	case fusedAcquire:
		// Parameters: owner, new holder id, ttl (ms), scope, key, owner, hold limit, scope, key.
		// live is the re-entry: the sub-SELECT picked a live row only if it is the owner's.
		ret = ret + " RETURNING o.owner, o.holder_id, o.hold_count, o.fencing_token, o.expires_at, o.ttl_ms, o.now"
		return "UPDATE " + leasesTable + " l SET owner = o.a_owner," +
			" holder_id = CASE WHEN o.live THEN o.holder_id ELSE o.a_holder END," +
			" hold_count = CASE WHEN o.live THEN o.hold_count + 1 ELSE 1 END," +
			" fencing_token = CASE WHEN o.live THEN o.fencing_token ELSE o.fencing_token + 1 END," +
			" expires_at = o.now + 1 + o.a_ttl, ttl_ms = o.a_ttl" +
			" FROM (SELECT x.*, x.owner <> '' AND x.expires_at > x.now AS live FROM (" +
			"SELECT " + cols + ", ?::text AS a_owner, ?::text AS a_holder, ?::bigint AS a_ttl" + key +
			" AND fencing_token > 0 AND (owner = '' OR expires_at <= " + now + " OR (owner = ? AND hold_count < ?))" +
			d.ForUpdate + ") x) o" + ret
	case fusedRelease:
		// Parameters: keep-free period (ms), scope, key, owner, token, token, scope, key.
		return "UPDATE " + leasesTable + " l SET" +
			" owner = CASE WHEN o.hold_count = 1 THEN '' ELSE o.owner END," +
			" holder_id = CASE WHEN o.hold_count = 1 THEN '' ELSE o.holder_id END," +
			" hold_count = o.hold_count - 1," +
			" expires_at = CASE WHEN o.hold_count = 1 THEN o.now + o.a_keep ELSE o.expires_at END," +
			" ttl_ms = CASE WHEN o.hold_count = 1 THEN 0 ELSE o.ttl_ms END" +
			" FROM (SELECT " + cols + ", ?::bigint AS a_keep" + key +
			" AND owner = ? AND owner <> '' AND expires_at > " + now + " AND hold_count >= 1" +
			" AND (?::bigint = 0 OR fencing_token = ?)" + d.ForUpdate + ") o" +
			ret + " AND o.expires_at > o.now" +
			" RETURNING o.owner, o.holder_id, o.hold_count, o.fencing_token, o.expires_at, o.ttl_ms, o.now"
	default: // fusedRenew
		// Parameters: ttl (ms), ttl, scope, key, owner, scope, key.
		return "UPDATE " + leasesTable + " l SET expires_at = o.now + 1 + o.a_ttl, ttl_ms = o.a_ttl" +
			" FROM (SELECT " + cols + ", CASE WHEN ?::bigint > 0 THEN ?::bigint ELSE ttl_ms END AS a_ttl" + key +
			" AND owner = ? AND owner <> '' AND expires_at > " + now + d.ForUpdate + ") o" +
			ret + " AND o.expires_at > o.now" +
			" RETURNING o.owner, o.holder_id, o.hold_count, o.fencing_token, o.expires_at, o.ttl_ms, o.now"
	}
}
