// Package workerid leases snowflake worker ids: an instance takes a free id from a shared
// store, renews it while it runs and frees it when it stops, so two live instances never hold
// the same id and restarted instances reuse freed ones. Each lease record also keeps the
// highest timestamp its holder may have issued, which survives the lease, so that the next
// holder of the id can refuse to issue before its clock has passed it.
//
// Stores: Redis (SET NX PX, compare-and-set in Lua) and SQL (SQLite, MySQL or PostgreSQL, one row per id).
package workerid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/libs/server"
)

// Errors a Store returns.
var (
	// ErrNoFreeID means every id is leased by a live holder.
	ErrNoFreeID = errors.New("workerid: no free worker id")
	// ErrLost means the lease ended (expired, or was taken over) before it was renewed.
	ErrLost = errors.New("workerid: lease lost")
	// ErrUnavailable means the store could not be reached or did not answer. It wraps
	// server.ErrUnavailable, which every service answers as unavailable.
	ErrUnavailable = fmt.Errorf("workerid: %w", server.ErrUnavailable)
)

// Lease is a held worker id.
type Lease struct {
	// ID is the worker id, 0 to the store's Count-1.
	ID int
	// Owner is the holder's random secret; only it can renew or release the lease.
	Owner string
	// LastMillis is the highest Unix millisecond any earlier holder of ID may have issued an
	// ID at; the new holder must not issue at or before it. 0 when the id was never used.
	LastMillis int64
}

// Store is where worker ids are leased. Every method is one atomic step on the store.
// Implementations must be safe for concurrent use.
type Store interface {
	// Acquire leases the lowest free id (free: never leased, released, or expired) to owner
	// for ttl, or fails with ErrNoFreeID.
	Acquire(ctx context.Context, owner string, ttl time.Duration) (Lease, error)
	// Renew extends owner's lease on id to ttl from now and raises the id's recorded last
	// millisecond to at least lastMillis. It fails with ErrLost when owner no longer holds id.
	Renew(ctx context.Context, id int, owner string, ttl time.Duration, lastMillis int64) error
	// Release frees owner's lease on id and records lastMillis, the highest millisecond the
	// owner actually issued at. Releasing a lease that was lost does nothing.
	Release(ctx context.Context, id int, owner string, lastMillis int64) error
	// Close releases the store's connections, not its leases.
	Close() error
}

// Count is how many worker ids the stores hand out: the 10 bits of the snowflake layout.
const Count = 1024

// unavailable wraps a store error as ErrUnavailable, unless it is the context's own ending,
// whose cause is returned instead (see server.Unavailable).
func unavailable(ctx context.Context, store string, err error) error {
	return server.Unavailable(ctx, ErrUnavailable, store, err)
}
