package lock

import (
	"context"
	"time"
)

// BatchBackend is a Backend that runs the steps of many operations together, one round trip
// for all of them (the Redis engine sends them as one pipeline; the SQL engines run them as
// a few set statements in one transaction per 512 keys). The service's Batch hands it
// every operation of a batch that takes one step on it, instead of running each on a
// goroutine of its own and letting the engine gather them again.
type BatchBackend interface {
	Backend
	// RunSteps runs every step as its own method would (TryAcquire, Release, Renew or
	// Inspect, after Step.Kind) and sets its results, Err included. Each step stays one
	// atomic step on the engine, and one step's failure is its own: the others' results
	// stand. ctx is the batch's.
	RunSteps(ctx context.Context, steps []*Step)
}

// StepKind names the Backend method a Step stands for.
type StepKind uint8

// The kinds of Step.
const (
	StepTryAcquire StepKind = iota + 1
	StepRelease
	StepRenew
	StepInspect
)

// Step is one Backend call of a batch (BatchBackend): its method's arguments and, once run,
// its results.
type Step struct {
	// Kind is the method.
	Kind StepKind
	// Key is the lock's key.
	Key string
	// Owner is the owner digest (see Lease.Owner); empty for Inspect.
	Owner string
	// TTL is TryAcquire's and Renew's ttl.
	TTL time.Duration
	// Token is Release's fencing token.
	Token uint64

	// Attempt is TryAcquire's answer.
	Attempt Attempt
	// Remaining and Released are Release's answers.
	Remaining uint32
	Released  Released
	// Lease is Renew's answer.
	Lease Lease
	// State is Inspect's answer.
	State State
	// Err is the method's error.
	Err error
}
