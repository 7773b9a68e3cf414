// Package lock is coordkit's lock service: the Connect handler, the Backend interface every
// lock engine implements, and the waiting logic shared by all of them. Engines live in
// subpackages (redislock, sqllock), one per storage technology.
package lock

import (
	"context"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// Errors a Backend returns. Each carries the Connect code its caller gets (server.NewError),
// which server.Error, the one mapping, gives it at the edge.
var (
	// ErrNotHeld means nobody holds the lock: it was released or its lease expired.
	// Its code is failed_precondition.
	ErrNotHeld = server.NewError(connect.CodeFailedPrecondition, "lock: not held")
	// ErrNotOwner means the lock is held, by another owner. Its code is permission_denied.
	ErrNotOwner = server.NewError(connect.CodePermissionDenied, "lock: held by another owner")
	// ErrUnavailable means the backend could not be reached or did not answer. It wraps
	// server.ErrUnavailable, which every service answers as unavailable.
	ErrUnavailable = fmt.Errorf("lock: %w", server.ErrUnavailable)
	// ErrHoldLimit means a re-entry would take the owner's hold count past MaxHoldCount; the
	// lease is left as it was. Its code is resource_exhausted.
	ErrHoldLimit = server.NewError(connect.CodeResourceExhausted, "lock: hold count at its limit")
)

// MaxHoldCount is the most holds one owner can have on one lock: the hold count travels as a
// uint32, and a re-entry at this count fails with ErrHoldLimit rather than wrap to 0.
const MaxHoldCount = math.MaxUint32

// Lease is a held lock as its holder sees it.
type Lease struct {
	// Key is the lock's key.
	Key string
	// Owner is the holder's secret, as the service handed it to the backend: the service
	// hashes owners before any backend sees them, so a backend's Owner is that digest, and
	// the service puts the caller's secret back before answering.
	Owner string
	// HolderID is the lease's public id (see NewHolderID), set by every acquire: the id the
	// lease's State and events show. Renew may leave it empty.
	HolderID string
	// FencingToken strictly increases with every new holder of the key.
	FencingToken uint64
	// ExpiresAt is a lower bound of when the backend lets the lease go: taken from the
	// service's clock before the backend was asked.
	ExpiresAt time.Time
	// HoldCount is how many times the owner holds the lock.
	HoldCount uint32
}

// State is a lock as anyone may see it: no owner secret.
type State struct {
	// Held says whether someone holds the lock.
	Held bool
	// HolderID is the lease's public id: random per lease (NewHolderID, HolderIDOf), the
	// same from every instance, and kept by re-entries and renewals. Empty for a lease an
	// older version stored, whose owner the service cannot tell (it runs out at its ttl).
	HolderID string
	// FencingToken is the holder's fencing token.
	FencingToken uint64
	// ExpiresAt is when the holder's lease ends unless renewed.
	ExpiresAt time.Time
	// HoldCount is the holder's hold count.
	HoldCount uint32
}

// Released names the lease a Release dropped a hold of, publicly: the release event carries
// it.
type Released struct {
	// FencingToken is the lease's fencing token.
	FencingToken uint64
	// HolderID is the lease's holder id (see State.HolderID).
	HolderID string
}

// Attempt is the outcome of one try to acquire.
type Attempt struct {
	// Acquired says whether the caller now holds the lock.
	Acquired bool
	// Lease is the caller's lease when Acquired.
	Lease Lease
	// Holder is the current holder when not Acquired (not Held: the lock is free, but a
	// fair waiter ahead of the caller has the next turn).
	Holder State
	// Place is a fair waiter's place in the backend's line when not Acquired, 1 = next;
	// 0 outside fair mode.
	Place int
	// Arrival orders fair waiters: the backend's number for owner's entry, lower first;
	// 0 outside fair mode.
	Arrival int64
	// Raced says the attempt lost a race rather than met a holder for sure (Redlock: no
	// owner on a majority of nodes), so no release event may follow: a waiter tries again
	// after a short backoff instead of waiting for one.
	Raced bool
}

// Backend is one lock engine. Every method is a single atomic step on the engine: no method
// leaves partial state behind when it fails or its context ends. Implementations must be safe
// for concurrent use.
type Backend interface {
	// TryAcquire makes one attempt: it takes a free or expired lock with a new fencing token
	// and a new random holder id, re-enters a lock the owner holds (hold count + 1, lease
	// extended to ttl, same token and holder id; ErrHoldLimit at MaxHoldCount), or reports
	// the holder. The lease remembers ttl as its own ttl, which a Renew without a ttl reuses.
	// owner is opaque to the backend, which stores it and compares it byte for byte (the
	// service passes a digest of the caller's secret, see Lease.Owner).
	TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (Attempt, error)
	// Release drops one hold of owner's lease and returns the holds left; at 0 the lock is
	// free. A non-zero token scopes it to the lease with that fencing token: when the owner's
	// lease has another token (the one meant was released or expired, and the owner took the
	// lock anew) it fails with ErrNotHeld and changes nothing, so a delayed or repeated
	// release never drops a hold of a newer lease. It returns the holds left and the fencing
	// token and holder id of the lease it dropped one from. It fails with ErrNotHeld or
	// ErrNotOwner.
	Release(ctx context.Context, key, owner string, token uint64) (remaining uint32, lease Released, err error)
	// Renew extends owner's lease to now + ttl. A ttl of 0 means the lease's own ttl: the one
	// the acquire or renew that last set a ttl asked for. A non-zero ttl becomes the lease's
	// own. It fails with ErrNotHeld or ErrNotOwner.
	Renew(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error)
	// Inspect reports the lock's state.
	Inspect(ctx context.Context, key string) (State, error)
	// Close releases the backend's connections; the locks it holds stay until they expire.
	Close() error
}

// FairBackend is implemented by engines that queue waiters natively, such as ZooKeeper's
// sequential nodes where each waiter watches only its predecessor: first come, first served,
// and a release wakes exactly one waiter. The service hands such an engine the whole wait
// instead of polling TryAcquire.
type FairBackend interface {
	Backend
	// AcquireWait is TryAcquire that waits in line up to wait (or until ctx ends) while the
	// lock is taken; when the wait passes it leaves the line and reports the holder, not an
	// error.
	AcquireWait(ctx context.Context, key, owner string, ttl, wait time.Duration) (Attempt, error)
}

// QueueBackend is implemented by engines that keep a line of waiters in the backend itself
// for fair mode: first come, first served across every instance. Each entry has a lease of
// its own, which the waiter's attempts renew, so a dead instance's waiters are skipped once
// their entries' leases pass, and a waiter that gives up leaves at once.
type QueueBackend interface {
	Backend
	// TryAcquireFair is TryAcquire for owner as a waiter in key's line: it takes the lock only
	// when the lock is free and no live entry is ahead of owner (a re-entry by the holder is
	// never queued); otherwise owner keeps its place, or takes the last one, with its entry's
	// lease renewed to entryTTL, and the Attempt reports the holder and owner's place.
	TryAcquireFair(ctx context.Context, key, owner string, ttl, entryTTL time.Duration) (Attempt, error)
	// LeaveQueue takes owner's entry out of key's line.
	LeaveQueue(ctx context.Context, key, owner string) error
}

// Unavailable wraps an engine error as ErrUnavailable, unless it is the context's own
// ending, whose cause is returned instead: the caller sees canceled or deadline exceeded, or
// the server's shutdown (which the handler answers as unavailable). It is
// server.Unavailable, the one helper every service's engines share.
func Unavailable(ctx context.Context, engine string, err error) error {
	return server.Unavailable(ctx, ErrUnavailable, engine, err)
}
