package zklock

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/coordkit/coordkit/services/lock"
)

// childPrefix starts every queue node's name; the attempt id and the sequence number ZooKeeper
// appends follow it: lock-<16 hex>-0000000042.
const childPrefix = "lock-"

// seqDigits is the width of the sequence number ZooKeeper appends to a sequential node.
const seqDigits = 10

// dataVersion is the format of nodeData this build writes. Format 2 added Token and LeaseMs;
// this build still reads format 1 (no token: the creation zxid is the token; no lease ttl:
// the ttl is the lease's own), so it upgrades a running ensemble in place. Builds that know
// only format 1 refuse format 2 nodes (errBadData) instead of dropping the carried token, so
// during a rolling upgrade an old instance fails calls on a key a new one wrote, rather than
// hand out a changed fencing token.
const dataVersion = 2

// oldestDataVersion is the oldest format this build reads.
const oldestDataVersion = 1

// acl is open: coordkit trusts the ensemble's network, as the other backends trust Redis or
// the database. Node data holds no secret (Owner is the digest the service passes, and a
// holder id is derived from the node's random name), but anyone who can write the tree can
// delete a lease: restrict the ensemble's access accordingly.
var acl = zk.WorldACL(zk.PermAll)

// parentName encodes a key into one node name. Keys are any UTF-8 up to 512 bytes, including
// '/', '.', NUL-free control characters and emoji, none of which ZooKeeper accepts verbatim;
// unpadded base64url is reversible, stays below 700 bytes, and never is "." or "..".
func parentName(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(key))
}

// attemptPrefix returns the name prefix of one queue node: a random attempt id makes the node
// findable after a create whose reply was lost (ZooKeeper's "protected" node recipe).
func attemptPrefix() string {
	var id [8]byte
	rand.Read(id[:]) //nolint:errcheck // crypto/rand.Read never fails
	return fmt.Sprintf("%s%x-", childPrefix, id)
}

// child is one queue node of a key, by name.
type child struct {
	name string
	seq  int64
}

// queueOrder parses the children of a key's parent into the line, first (the holder) first.
// Names that are not queue nodes are ignored, so stray nodes never block a key.
func queueOrder(names []string) []child {
	out := make([]child, 0, len(names))
	for _, n := range names {
		if !strings.HasPrefix(n, childPrefix) || len(n) < len(childPrefix)+seqDigits {
			continue
		}
		seq, err := strconv.ParseInt(n[len(n)-seqDigits:], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, child{name: n, seq: seq})
	}
	slices.SortFunc(out, func(a, b child) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), strings.Compare(a.name, b.name))
	})
	return out
}

// position returns the index of name in the line, or -1.
func position(line []child, name string) int {
	return slices.IndexFunc(line, func(c child) bool { return c.name == name })
}

// nodeData is what a queue node holds. A node with Holds >= 1 is a lease; a node with Holds 0
// is a waiter that becomes the lease by writing Holds 1 once it is first in line. Either ends
// TTLms after the node's mtime (the ZooKeeper leader's clock at its last write) unless written
// again: for a lease that is what is left of it, for a waiter its wait plus a grace, so a
// waiter whose process stalled or vanished cannot block the line for longer than it meant to
// wait.
type nodeData struct {
	V int `json:"v"`
	// Owner is the digest of the owner's secret that the service passes; nodes older
	// versions wrote hold the secret itself, which no digest matches.
	Owner string `json:"owner"`
	Holds uint32 `json:"holds"`
	TTLms int64  `json:"ttl_ms"`
	// LeaseMs is the lease's own ttl: the one the acquire, re-entry or renew that last set a
	// ttl asked for, which a Renew without a ttl reuses. It differs from TTLms after a
	// Release, which writes only what is left of the lease so that dropping a hold does not
	// extend it. 0 in format 1 nodes: TTLms is then the lease's own ttl.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// Token is the lease's fencing token once its node was replaced by a takeover (see
	// takeover.go); 0 means the node's creation zxid, which is the token of a node that
	// started the lease.
	Token uint64 `json:"token,omitempty"`
	// Origin is the name of the node that started the lease, once a takeover replaced it:
	// an attempt that finds its own node gone can tell whether a concurrent re-entry carried
	// its hold into a replacement. Empty means the node's own name.
	Origin string `json:"origin,omitempty"`
}

func (d nodeData) encode() []byte {
	d.V = dataVersion
	raw, _ := json.Marshal(d) // a struct of strings and numbers always marshals
	return raw
}

// errBadData means a node in a key's line does not hold lock data this build understands.
var errBadData = errors.New("zklock: not a lock node")

func decodeNode(path string, raw []byte) (nodeData, error) {
	var d nodeData
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("%w: %s: %v", errBadData, path, err)
	}
	if d.V < oldestDataVersion || d.V > dataVersion {
		return d, fmt.Errorf("%w: %s: format %d, this build reads %d to %d", errBadData, path, d.V, oldestDataVersion, dataVersion)
	}
	return d, nil
}

// entry is a queue node read from ZooKeeper: its data and its stat.
type entry struct {
	path string
	data nodeData
	stat *zk.Stat
}

// holding reports whether the node is a lease rather than a waiter.
func (e *entry) holding() bool { return e.data.Holds > 0 }

// token is the lease's fencing token: the zxid of the creation of the node that started the
// lease, carried in the data when a takeover replaced that node. Every new holder is a node
// created after the previous holder's node and its replacements were deleted (it queued
// behind them, or the key was free), and zxids order every change the ensemble ever made, so
// tokens strictly increase per key, even across deletions of the key's parent, which reset
// the sequence numbers in node names.
func (e *entry) token() uint64 {
	if e.data.Token != 0 {
		return e.data.Token
	}
	return uint64(e.stat.Czxid)
}

// origin is the name of the node that started e's lease.
func (e *entry) origin() string {
	if e.data.Origin != "" {
		return e.data.Origin
	}
	return e.path[strings.LastIndexByte(e.path, '/')+1:]
}

// holderID is the lease's public holder id, derived from the name of the node that started
// it (origin), whose attempt prefix is 64 random bits: the same from every instance and
// across takeovers, and nothing an owner's guess can be checked against.
func (e *entry) holderID() string { return lock.HolderIDOf(e.origin()) }

// released names e's lease for a release event.
func (e *entry) released() lock.Released {
	return lock.Released{FencingToken: e.token(), HolderID: e.holderID()}
}

// leaseTTL is the lease's own ttl, which a Renew without a ttl reuses.
func (e *entry) leaseTTL() time.Duration {
	if e.data.LeaseMs > 0 {
		return time.Duration(e.data.LeaseMs) * time.Millisecond
	}
	return time.Duration(e.data.TTLms) * time.Millisecond
}

// leaseData is a lease's node data for owner with holds and ttl as the lease's own ttl.
func leaseData(owner string, holds uint32, ttl time.Duration) nodeData {
	ms := ttl.Milliseconds()
	return nodeData{Owner: owner, Holds: holds, TTLms: ms, LeaseMs: ms}
}
