package zklock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/services/lock"
)

// maxSteps bounds the loops that chase a changing line (a head that vanished or expired, a
// versioned write that lost a race). Each step means someone else made progress.
const maxSteps = 64

// errMoved means the line changed under a versioned step; the caller reads it again.
var errMoved = errors.New("zklock: lock node changed concurrently")

// moved reports whether a versioned write lost a race to a concurrent change.
func moved(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, errMoved)
}

// view is a key's line as one read saw it.
type view struct {
	// head is the first node: the holder, or a waiter being handed the lock. nil when free.
	head *entry
	// exists says whether the key's parent exists, so a free key skips creating it again.
	exists bool
}

// liveHead reads the first live node of parent's line. A first node whose ttl has passed is
// deleted on the way (with its version, so a renewal that just landed wins): every instance
// that meets an expired lease ends it, not only the one that granted it.
func (b *Backend) liveHead(ctx context.Context, parent string) (view, error) {
	for range maxSteps {
		line, exists, err := b.children(ctx, parent)
		if err != nil || len(line) == 0 {
			return view{exists: exists}, err
		}
		e, err := b.read(ctx, parent+"/"+line[0].name)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return view{}, err
		case b.clock.expired(time.Now(), e):
			if err := b.expire(ctx, e); err != nil {
				return view{}, err
			}
			continue
		}
		if e.holding() {
			b.leases.put(e)
		}
		return view{head: e, exists: true}, nil
	}
	return view{}, b.tooBusy(ctx, parent)
}

// expire deletes a node whose ttl passed, unless it was written since it was read.
func (b *Backend) expire(ctx context.Context, e *entry) error {
	err := b.delete(ctx, e.path, e.stat.Version)
	switch {
	case err == nil:
		b.timers.forget(e.path)
		b.leases.drop(e.path)
		key := keyOf(parentOf(e.path))
		b.log.Debug("zklock: lease expired", "key", key, "token", e.token(), "holds", e.data.Holds)
		if e.holding() { // only the one delete at this version succeeds: reported once
			b.Report(lock.Expiry{Key: key, FencingToken: e.token(), HolderID: e.holderID()})
		}
		b.dropParent(ctx, parentOf(e.path))
	case moved(err):
	default:
		return err
	}
	return nil
}

// dropParent deletes a key's parent once its line is empty, at once rather than at the
// ensemble's next container sweep (see createParent). Another line member (ErrNotEmpty) or
// another cleaner (ErrNoNode) is fine. The parent's sequence counter goes with it, which is
// why tokens are zxids, not sequences.
func (b *Backend) dropParent(ctx context.Context, parent string) {
	err := b.delete(ctx, parent, -1)
	if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
		b.log.Debug("zklock: could not remove an empty lock parent", "key", keyOf(parent), "err", err)
	}
}

// tooBusy is the error of a loop that kept losing races for maxSteps.
func (b *Backend) tooBusy(ctx context.Context, parent string) error {
	return lock.Unavailable(ctx, engine, fmt.Errorf("zklock: key %q: the line kept changing for %d reads", keyOf(parent), maxSteps))
}

// stateOf is the public view of a head node. A waiter being handed the lock shows as its first
// hold: it is one write away from holding it, and nobody else can take it meanwhile.
func (b *Backend) stateOf(e *entry) lock.State {
	now := time.Now()
	return lock.State{
		Held: true, HolderID: e.holderID(), FencingToken: e.token(),
		ExpiresAt: now.Add(b.clock.left(now, e)), HoldCount: max(e.data.Holds, 1),
	}
}

// children reads parent's line in order; a missing parent is an empty line.
func (b *Backend) children(ctx context.Context, parent string) ([]child, bool, error) {
	names, err := call(ctx, b, func() ([]string, error) {
		names, _, err := b.conn.Children(parent)
		return names, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fail(ctx, err)
	}
	return queueOrder(names), true, nil
}

// got is one getData answer.
type got struct {
	data  []byte
	stat  *zk.Stat
	watch <-chan zk.Event
}

// read reads one queue node.
func (b *Backend) read(ctx context.Context, path string) (*entry, error) {
	g, err := call(ctx, b, func() (got, error) {
		data, st, err := b.conn.Get(path)
		return got{data: data, stat: st}, err
	}, nil)
	if err != nil {
		return nil, fail(ctx, err)
	}
	d, err := decodeNode(path, g.data)
	return &entry{path: path, data: d, stat: g.stat}, err
}

// readWatch reads one queue node and leaves a watch on it in the same request, so no change
// can slip between the read and the watch. The watch fires on the node's next write or
// deletion, or when the session ends.
func (b *Backend) readWatch(ctx context.Context, path string) (*entry, <-chan zk.Event, error) {
	g, err := call(ctx, b, func() (got, error) {
		data, st, w, err := b.conn.GetW(path)
		return got{data: data, stat: st, watch: w}, err
	}, nil)
	if err != nil {
		return nil, nil, fail(ctx, err)
	}
	d, err := decodeNode(path, g.data)
	return &entry{path: path, data: d, stat: g.stat}, g.watch, err
}

// set writes a queue node's data at version and samples the server clock from the reply.
func (b *Backend) set(ctx context.Context, path string, d nodeData, version int32, undo func(*zk.Stat, error)) (*zk.Stat, error) {
	raw := d.encode()
	sent := time.Now()
	st, err := call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(path, raw, version) }, undo)
	if err != nil {
		return nil, fail(ctx, err)
	}
	b.clock.observe(sent, time.Now(), st.Mtime)
	return st, nil
}

// delete deletes a node at version (-1: any).
func (b *Backend) delete(ctx context.Context, path string, version int32) error {
	_, err := call(ctx, b, func() (struct{}, error) { return struct{}{}, b.conn.Delete(path, version) }, nil)
	if err != nil {
		return fail(ctx, err)
	}
	return nil
}

// createParent creates a key's parent, unless it exists, as a container node: the ensemble
// deletes a container some time after its last child goes (every minute by default,
// znode.container.checkIntervalMs). Lines also empty without any call of ours seeing it: a
// session that ends takes its nodes with it, a waiter leaves, a try-lock gives its place back
// behind a holder that then leaves. Without containers each would strand the key's parent
// forever, and per-entity keys (order:<id>) would grow the tree without bound. A create in a
// container the ensemble just removed fails with ErrNoNode; enqueue creates it again.
// Containers need ZooKeeper 3.5.3 or later; an older ensemble fails every acquire.
func (b *Backend) createParent(ctx context.Context, path string) error {
	_, err := call(ctx, b, func() (string, error) { return b.conn.CreateContainer(path, nil, zk.FlagContainer, acl) }, nil)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fail(ctx, err)
	}
	return nil
}

// createPersistent creates a persistent node unless it exists.
func (b *Backend) createPersistent(ctx context.Context, path string) error {
	_, err := call(ctx, b, func() (string, error) { return b.conn.Create(path, nil, zk.FlagPersistent, acl) }, nil)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fail(ctx, err)
	}
	return nil
}

// sampleClock writes the probe node under the root to sample the leader's clock; the lock
// nodes' own writes keep the sample fresh while the backend is busy.
func (b *Backend) sampleClock(ctx context.Context) error {
	probe := b.root + "/.clock" // parent names are base64url, never starting with '.'
	for range 2 {
		sent := time.Now()
		st, err := call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(probe, nil, -1) }, nil)
		if errors.Is(err, zk.ErrNoNode) {
			if err := b.createPersistent(ctx, probe); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fail(ctx, err)
		}
		b.clock.observe(sent, time.Now(), st.Mtime)
		return nil
	}
	return fail(ctx, fmt.Errorf("zklock: clock probe %s keeps vanishing", probe))
}

// parentOf is the parent node of path.
func parentOf(path string) string {
	return path[:strings.LastIndexByte(path, '/')]
}

// keyOf decodes a parent node's path back to its key, for logs and errors.
func keyOf(parent string) string {
	raw, err := base64.RawURLEncoding.DecodeString(parent[strings.LastIndexByte(parent, '/')+1:])
	if err != nil {
		return parent
	}
	return string(raw)
}
