package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/batch"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1/lockv1connect"
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
	ops *batch.Coalescer[*lockv1.BatchOperation, *lockv1.BatchResult]
	// unbatched is set once the service answered Batch with unimplemented (an older
	// version): from then on every call goes out alone.
	unbatched atomic.Bool
}

var _ lockv1connect.LockServiceClient = (*batchingLocks)(nil)

// newBatchingLocks wraps raw; maxInFlight is how many requests may be in flight before
// calls start to queue into batches.
func newBatchingLocks(raw lockv1connect.LockServiceClient, maxInFlight int) *batchingLocks {
	b := &batchingLocks{LockServiceClient: raw}
	b.ops = batch.New(b.send, batch.Config{MaxInFlight: maxInFlight, MaxBatch: lockBatchLimit})
	return b
}

// send sends one operation as its own call, several as one Batch.
func (b *batchingLocks) send(ctx context.Context, ops []*lockv1.BatchOperation) ([]batch.Result[*lockv1.BatchResult], error) {
	if len(ops) == 1 || b.unbatched.Load() {
		return b.sendEach(ctx, ops), nil
	}
	res, err := b.LockServiceClient.Batch(ctx, &lockv1.BatchRequest{Operations: ops})
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		b.unbatched.Store(true)
		return b.sendEach(ctx, ops), nil
	}
	if err != nil {
		return nil, err
	}
	if len(res.GetResults()) != len(ops) {
		return nil, fmt.Errorf("%w: %d operations, %d results", batch.ErrShortAnswer, len(ops), len(res.GetResults()))
	}
	out := make([]batch.Result[*lockv1.BatchResult], len(ops))
	for i, r := range res.GetResults() {
		out[i].Value = r
	}
	return out, nil
}

// sendEach sends every operation as its own unary call, at once.
func (b *batchingLocks) sendEach(ctx context.Context, ops []*lockv1.BatchOperation) []batch.Result[*lockv1.BatchResult] {
	out := make([]batch.Result[*lockv1.BatchResult], len(ops))
	done := make(chan struct{}, len(ops))
	for i, op := range ops {
		go func() {
			out[i].Value, out[i].Err = b.unary(ctx, op)
			done <- struct{}{}
		}()
	}
	for range ops {
		<-done
	}
	return out
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
	r, err := b.ops.Do(ctx, op)
	if err != nil {
		return nil, callError(ctx, err)
	}
	if e := r.GetError(); e != nil {
		return nil, operationError(e)
	}
	return r, nil
}

// callError is the error a call that did not get its own answer returns, as a Connect error
// the way the unary client would return it: the caller's context ending is canceled or
// deadline_exceeded, a broken answer internal; errors of the request itself already are
// Connect errors.
func callError(ctx context.Context, err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case ctx.Err() != nil:
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, batch.ErrShortAnswer):
		return connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewError(connect.CodeUnknown, err)
}

// operationError is a batched operation's error as the unary call would have returned it.
func operationError(e *lockv1.BatchError) error {
	var code connect.Code
	if code.UnmarshalText([]byte(e.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	return connect.NewError(code, errors.New(e.GetMessage()))
}

// mismatch is the error for a batch result that answers another kind of operation than the
// one sent: a broken service, never a success.
func mismatch(sent string, r *lockv1.BatchResult) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("client: the service answered a batched %s with %T", sent, r.GetResult()))
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
		return nil, mismatch("acquire", r)
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
		return nil, mismatch("release", r)
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
		return nil, mismatch("renew", r)
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
		return nil, mismatch("inspect", r)
	}
	return r.GetInspect(), nil
}
