package client

import (
	"context"
	"errors"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
)

// lockBatchLimit caps the operations of one Batch call the SDK sends: far below the
// service's 1000, so a batch of the longest keys and owners stays well inside its 1 MiB
// request limit.
const lockBatchLimit = 256

// batchingLocks is the lock API that sends concurrent calls together: a call made while
// another is in flight waits for it and leaves with every call that queued meanwhile, as one
// Batch request; a call made when nothing is in flight goes out at once as its own unary
// call, so an idle caller pays nothing and a service without Batch is still served. Acquires
// that wait server-side and Watch always go out alone. Every method answers exactly what
// the unary call would, errors included.
type batchingLocks struct {
	lockv1connect.LockServiceClient
	calls *batchCalls[*lockv1.BatchOperation, *lockv1.BatchResult]
}

var _ lockv1connect.LockServiceClient = (*batchingLocks)(nil)

// newBatchingLocks wraps raw; maxInFlight is how many requests may be in flight before
// calls start to queue into batches.
func newBatchingLocks(raw lockv1connect.LockServiceClient, maxInFlight int) *batchingLocks {
	b := &batchingLocks{LockServiceClient: raw}
	b.calls = newBatchCalls(maxInFlight, lockBatchLimit, b.batch, b.unary)
	return b
}

// batch sends ops as one Batch call.
func (b *batchingLocks) batch(ctx context.Context, ops []*lockv1.BatchOperation) ([]*lockv1.BatchResult, error) {
	res, err := b.LockServiceClient.Batch(ctx, &lockv1.BatchRequest{Operations: ops})
	return res.GetResults(), err
}

// unary sends op as its own call and wraps the answer as a batch result.
func (b *batchingLocks) unary(ctx context.Context, op *lockv1.BatchOperation) (*lockv1.BatchResult, error) {
	var res lockv1.BatchResult
	switch op := op.GetOperation().(type) {
	case *lockv1.BatchOperation_Acquire:
		r, err := b.LockServiceClient.Acquire(ctx, op.Acquire)
		if err != nil {
			return nil, err
		}
		res.Result = &lockv1.BatchResult_Acquire{Acquire: r}
	case *lockv1.BatchOperation_Release:
		r, err := b.LockServiceClient.Release(ctx, op.Release)
		if err != nil {
			return nil, err
		}
		res.Result = &lockv1.BatchResult_Release{Release: r}
	case *lockv1.BatchOperation_Renew:
		r, err := b.LockServiceClient.Renew(ctx, op.Renew)
		if err != nil {
			return nil, err
		}
		res.Result = &lockv1.BatchResult_Renew{Renew: r}
	case *lockv1.BatchOperation_Inspect:
		r, err := b.LockServiceClient.Inspect(ctx, op.Inspect)
		if err != nil {
			return nil, err
		}
		res.Result = &lockv1.BatchResult_Inspect{Inspect: r}
	default:
		return nil, errors.New("client: empty batch operation")
	}
	return &res, nil
}

// do sends op through the coalescer and unwraps its own error.
func (b *batchingLocks) do(ctx context.Context, op *lockv1.BatchOperation) (*lockv1.BatchResult, error) {
	r, err := b.calls.do(ctx, op)
	if err != nil {
		return nil, err
	}
	if e := r.GetError(); e != nil {
		return nil, operationError(e)
	}
	return r, nil
}

// Acquire implements lockv1connect.LockServiceClient; an acquire that waits goes out alone.
func (b *batchingLocks) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	if req.GetWait().AsDuration() != 0 {
		return b.LockServiceClient.Acquire(ctx, req)
	}
	r, err := b.do(ctx, &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Acquire{Acquire: req}})
	if err != nil {
		return nil, err
	}
	if r.GetAcquire() == nil {
		return nil, mismatch("acquire", r.GetResult())
	}
	return r.GetAcquire(), nil
}

// Release implements lockv1connect.LockServiceClient.
func (b *batchingLocks) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	r, err := b.do(ctx, &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Release{Release: req}})
	if err != nil {
		return nil, err
	}
	if r.GetRelease() == nil {
		return nil, mismatch("release", r.GetResult())
	}
	return r.GetRelease(), nil
}

// Renew implements lockv1connect.LockServiceClient.
func (b *batchingLocks) Renew(ctx context.Context, req *lockv1.RenewRequest) (*lockv1.RenewResponse, error) {
	r, err := b.do(ctx, &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Renew{Renew: req}})
	if err != nil {
		return nil, err
	}
	if r.GetRenew() == nil {
		return nil, mismatch("renew", r.GetResult())
	}
	return r.GetRenew(), nil
}

// Inspect implements lockv1connect.LockServiceClient.
func (b *batchingLocks) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	r, err := b.do(ctx, &lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{Inspect: req}})
	if err != nil {
		return nil, err
	}
	if r.GetInspect() == nil {
		return nil, mismatch("inspect", r.GetResult())
	}
	return r.GetInspect(), nil
}
