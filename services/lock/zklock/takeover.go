package zklock

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// A lease node is ephemeral: it belongs to the session of the instance that created it, and
// ends when that session does. An instance can only vouch for its own session (it knows its
// timeout and that it is alive), so a renewal or re-entry that runs on another instance first
// moves the lease into its own session: one multi-operation creates a replacement node in this
// backend's session and deletes the old node at the version read. The two never exist at
// once, so the line never shows two heads, and if the old node changed or went (renewed,
// released, expired, its session ended) nothing happens and the caller reads the line again:
// a released lease is never brought back.
//
// The replacement keeps the lease's place and identity: its name ends in the old node's
// sequence number (queueOrder sorts by it, and later nodes have higher ones), and its data
// carries the lease's fencing token, so the token never changes while the lease lives, and the
// name of the node that started it (see carried).
// Waiters watching the old node wake at its deletion and then watch the replacement.

// ownedHere reports whether e's node belongs to this backend's session.
func (b *Backend) ownedHere(e *entry) bool {
	return e.stat.EphemeralOwner == b.conn.SessionID()
}

// takeOver replaces lease node e, of another session, with a node of this backend's session
// holding d (e's fencing token added) and returns it. It fails with a moved error when e
// changed or went since it was read.
func (b *Backend) takeOver(ctx context.Context, e *entry, d nodeData) (*entry, error) {
	d.Token, d.Origin = e.token(), e.origin()
	raw := d.encode()
	path := parentOf(e.path) + "/" + attemptPrefix() + e.path[len(e.path)-seqDigits:]
	ops := []any{
		&zk.CreateRequest{Path: path, Data: raw, Acl: acl, Flags: zk.FlagEphemeral},
		// A create's reply carries no stat; writing the same data again returns the new
		// node's stat (mtime, version, owner) in the same atomic step.
		&zk.SetDataRequest{Path: path, Data: raw, Version: 0},
		&zk.DeleteRequest{Path: e.path, Version: e.stat.Version},
	}
	// A takeover whose answer is lost may have happened: the replacement then lives in this
	// session with nobody watching its ttl. A timer check ends it at its ttl, or finds it gone.
	undo := func(_ []zk.MultiResponse, err error) {
		if err == nil || uncertain(err) {
			b.schedule(path, nil, 0)
		}
	}
	sent := time.Now()
	res, err := call(ctx, b, func() ([]zk.MultiResponse, error) { return b.conn.Multi(ops...) }, undo)
	if err != nil {
		return nil, fail(ctx, err)
	}
	if len(res) != len(ops) || res[1].Stat == nil {
		return nil, fail(ctx, errors.New("zklock: takeover: malformed multi reply"))
	}
	st := res[1].Stat
	b.clock.observe(sent, time.Now(), st.Mtime)
	return &entry{path: path, data: d, stat: st}, nil
}
