// Package taskpick is coordkit's task-pick service: pools of tasks that workers pick under
// leases, so two workers never hold one task at once (the classic "A and B grab the same task"),
// finished with fenced acks and recovered when a worker dies. The Connect handler, the Backend
// interface, waiting picks and the recovery sweeper live here; engines live in subpackages
// (redistask on Redis, sqltask on MySQL/MariaDB and SQLite).
package taskpick

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// Errors a Backend returns. Each carries the Connect code its caller gets (server.NewError),
// which server.Error, the one mapping, gives it at the edge.
var (
	// ErrNotFound means the task does not exist in the pool. Its code is not_found.
	ErrNotFound = server.NewError(connect.CodeNotFound, "taskpick: no such task")
	// ErrStaleLease means the token and secret are not the task's current lease, or that
	// lease expired. Its code is failed_precondition.
	ErrStaleLease = server.NewError(connect.CodeFailedPrecondition, "taskpick: not the task's current lease")
	// ErrUnavailable means the backend could not be reached or did not answer. It wraps
	// server.ErrUnavailable, which every service answers as unavailable.
	ErrUnavailable = fmt.Errorf("taskpick: %w", server.ErrUnavailable)
)

// Order says which available tasks a pick takes first.
type Order int

// Orders of Pick.
const (
	// FIFO takes the task that became available first.
	FIFO Order = iota
	// Priority takes the highest priority first, FIFO among equals.
	Priority
	// Random takes tasks uniformly at random.
	Random
)

// State is where a task is.
type State int

// States of a task.
const (
	// Available tasks wait to be picked.
	Available State = iota + 1
	// Delayed tasks are available once RunAt passes.
	Delayed
	// Leased tasks are held by a worker.
	Leased
	// Dead tasks used every attempt.
	Dead
	// Done tasks were acked and are kept for the retention.
	Done
	// Cancelled tasks were cancelled before they ran and are kept for the retention.
	Cancelled
)

// NewTask is a validated task to put.
type NewTask struct {
	ID       string
	Payload  []byte
	Priority int32
	Delay    time.Duration // from the backend's clock at the put; 0 means now
	// MaxAttempts is the attempt budget; 0 means the pool's default (MaxAttemptsFor).
	MaxAttempts uint32
	// UniqueKey, when not empty, makes the task unique in its pool for UniqueScope.
	UniqueKey   string
	UniqueScope UniqueScope
	// UniquePeriod is how long a UniquePeriodScope key is held from the put.
	UniquePeriod time.Duration
}

// UniqueScope says how long a task's unique key is held (see the proto's UniqueScope).
type UniqueScope int

// Scopes of a unique key.
const (
	// UniqueQueued holds the key while the task is available or delayed and was not picked
	// since it was put or requeued (its attempt count is 0).
	UniqueQueued UniqueScope = iota + 1
	// UniqueActive holds the key while the task is available, delayed or leased.
	UniqueActive
	// UniquePeriodScope holds the key for UniquePeriod from the put, whatever the task does.
	UniquePeriodScope
)

// Holds reports whether a key of scope s claimed by a task is still held, given that task's
// state and attempt count (exists false when the task is gone). UniquePeriodScope keys are
// judged by their own end, not by the task.
func (s UniqueScope) Holds(exists bool, st State, attempt uint32) bool {
	if !exists {
		return false
	}
	switch s {
	case UniqueQueued:
		return (st == Available || st == Delayed) && attempt == 0
	case UniqueActive:
		return st == Available || st == Delayed || st == Leased
	}
	return false
}

// PutResult is what a Put did with one task.
type PutResult struct {
	// Created is true when the task was added.
	Created bool
	// Duplicate is true when the task was not added because the task HolderID holds its
	// unique key.
	Duplicate bool
	// HolderID is, for a duplicate, the task holding the key.
	HolderID string
	// HolderState is, for a duplicate, the holder's state; 0 when it no longer exists.
	HolderState State
}

// LeasedTask is a picked task.
type LeasedTask struct {
	ID          string
	Payload     []byte
	Priority    int32
	Token       uint64
	Attempt     uint32
	MaxAttempts uint32
}

// Lease is what Ack, Nack and Extend present to a backend: the lease's public fencing token
// and the digest of its secret (LeaseDigest). A backend finishes a lease only when both are
// the task's current ones; it never sees the secret itself.
type Lease struct {
	Token  uint64
	Digest string
}

// PickSpec says what one pick attempt takes.
type PickSpec struct {
	// N is the most tasks to lease.
	N int
	// TTL is each lease's length.
	TTL time.Duration
	// Order says which available tasks come first; the tasks are returned in that order.
	Order Order
	// Digests holds the digests of the new leases' secrets, at least N of them: the i-th
	// task returned is leased under Digests[i].
	Digests []string
	// MaxBytes bounds the answer: the pick leases no task whose AnswerBytes would take the
	// sum past it, except the first, which always fits (Config.MaxAnswerBytes is at least
	// MinAnswerBytes). A task that does not fit stays available.
	MaxBytes int
}

// Task is a task as anyone may see it.
type Task struct {
	ID          string
	Payload     []byte
	Priority    int32
	State       State
	Attempt     uint32
	MaxAttempts uint32
	Failures    uint32
	Recoveries  uint32
	// RunAt is when the task becomes (became) available; for a leased task, its lease's end.
	RunAt     time.Time
	LastError string
}

// Stats counts a pool's tasks.
type Stats struct {
	Available, Delayed, Leased, Dead, Done, Cancelled uint64
	// OldestAvailable is when the longest-waiting available task became available; zero
	// when none is.
	OldestAvailable time.Time
	// Now is the backend's clock when it counted.
	Now time.Time
}

// Picked is the result of one Pick attempt.
type Picked struct {
	Tasks []LeasedTask
	// NextDue, when fewer tasks than asked were found, is the earliest time a delayed task
	// becomes due (zero when none is delayed): a waiting pick sleeps until then at most.
	NextDue time.Time
	// Full is true when MaxBytes stopped the pick while more tasks may be available.
	Full bool
	// Paused is true when the pool is paused: the pick leased nothing, and a waiting pick
	// waits for ResumePool's wake-up (or its recheck), not for NextDue.
	Paused bool
	// Limited is true when the pool's limits stopped the pick: it leased nothing because the
	// pool has MaxLeased live leases (NextDue is then the earliest end of one of them, or of
	// a delayed task's wait, and a waiting pick is also woken by the Ack or Nack that frees a
	// place), or because its rate limit has no token (NextDue is then when the next comes).
	Limited bool
}

// Recovered counts, per pool, the tasks a sweep made available again.
type Recovered struct {
	Pool string
	// Available is how many expired leases went back to available.
	Available int
	// Dead is how many expired leases were on their last attempt and died.
	Dead int
	// Due is how many delayed tasks became available (backends that move them).
	Due int
}

// Backend is one storage engine. Every method is atomic on its own: Pick moves each task it
// returns from available to leased in one step no other Pick can interleave with, and Ack,
// Nack and Extend check the token and the lease's end in the same step that changes the task.
// The backend's own clock decides when a lease ends and when a delayed task is due.
type Backend interface {
	// Put adds the tasks that do not exist in pool, in order, and says per task what it did.
	// A task with a UniqueKey that another task of pool holds (UniqueScope.Holds, or a
	// UniquePeriodScope key whose period has not passed) is a duplicate and is not added;
	// otherwise a task that is added claims its key. A task whose id exists is not added
	// and claims nothing. It writes all of them or none, and is exact under concurrent Puts
	// of one key from any number of instances.
	Put(ctx context.Context, pool string, tasks []NewTask) ([]PutResult, error)
	// Pick leases up to spec.N available tasks of pool, in spec.Order, and returns them in
	// that order (pick order), each under its digest, within spec.MaxBytes.
	Pick(ctx context.Context, pool string, spec PickSpec) (Picked, error)
	// Ack finishes the task held by lease: ErrNotFound or ErrStaleLease otherwise. A token
	// that no lease can have (such as one of 2^63 or more) is ErrStaleLease like any other.
	Ack(ctx context.Context, pool, id string, lease Lease) error
	// Nack gives the task held by lease back, available after retryAfter, or dead when it was
	// on its last attempt (dead reports which). A retryAfter of PoolPolicy means the pool's
	// retry policy's delay for the task's attempt (RetryPolicy.Delay; 0 without a policy).
	Nack(ctx context.Context, pool, id string, lease Lease, retryAfter time.Duration, reason string) (dead bool, err error)
	// Extend sets the end of the lease to now + ttl.
	Extend(ctx context.Context, pool, id string, lease Lease, ttl time.Duration) error
	// Get reads a task.
	Get(ctx context.Context, pool, id string) (Task, error)
	// Stats counts pool's tasks.
	Stats(ctx context.Context, pool string) (Stats, error)
	// ListDead returns up to limit dead tasks of pool, oldest death first, whose AnswerBytes
	// sum to at most maxBytes (the first always counts as fitting), how many there are, and
	// whether maxBytes cut the list short.
	ListDead(ctx context.Context, pool string, limit, maxBytes int) (tasks []Task, total uint64, truncated bool, err error)
	// Requeue makes the dead tasks among ids available with a fresh attempt budget.
	Requeue(ctx context.Context, pool string, ids []string) (requeued []bool, err error)
	// Sweep returns tasks whose lease ended to available (dead on their last attempt) and
	// deletes done tasks past the retention, in every pool, at most limit tasks per call.
	// Two sweeps at once never recover one lease twice.
	Sweep(ctx context.Context, limit int) ([]Recovered, error)
	// Settings reads pool's settings record; stored is false (and the settings zero, but
	// for nothing) when the pool has none.
	Settings(ctx context.Context, pool string) (settings PoolSettings, stored bool, err error)
	// SetSettings stores pool's retry policy, default max attempts and limits in one write, creating
	// the record if needed and leaving its paused flag as it was; it returns the record.
	SetSettings(ctx context.Context, pool string, settings PoolSettings) (PoolSettings, error)
	// SetPaused sets pool's paused flag, creating the record if needed. A Pick that begins
	// after it returned sees the flag.
	SetPaused(ctx context.Context, pool string, paused bool) error
	// Cancel cancels an available or delayed task: kept as Cancelled for the retention, or
	// deleted without one. A task already cancelled is no error; ErrNotFound,
	// ErrCancelLeased, ErrCancelDead or ErrCancelDone otherwise.
	Cancel(ctx context.Context, pool, id string) error
	// Close releases the backend's resources (not connections it was given).
	Close() error
	// ScheduleStore keeps the pools' schedules.
	ScheduleStore
}
