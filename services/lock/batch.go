package lock

import (
	"context"

	"github.com/coordkit/coordkit/libs/server"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

// Batch implements LockServiceHandler: every operation runs at once through the same code
// as its single call, so each gets exactly the answer or error that call would, and the
// backends see them together (the Redis engines pipeline concurrent scripts into one round
// trip).
func (s *Service) Batch(ctx context.Context, req *lockv1.BatchRequest) (*lockv1.BatchResponse, error) {
	ops := req.GetOperations()
	if err := server.CheckBatch("operations", len(ops)); err != nil {
		return nil, err
	}
	results := make([]*lockv1.BatchResult, len(ops))
	failures := make([]error, len(ops))
	server.RunBatch(len(ops), func(i int) { results[i], failures[i] = s.runOperation(ctx, ops[i]) }, func(i int, p any) {
		server.LogPanic(ctx, s.log, "lock", p)
		code, msg := server.OperationError(ctx, server.ErrPanic)
		results[i] = &lockv1.BatchResult{Error: &lockv1.BatchError{Code: code.String(), Message: msg}}
	})
	server.LogBatchFailures(ctx, s.log, "lock", failures)
	return &lockv1.BatchResponse{Results: results}, nil
}

// runOperation runs one operation of a batch and wraps its answer or error; it also returns
// the error, for the batch's log line.
func (s *Service) runOperation(ctx context.Context, op *lockv1.BatchOperation) (*lockv1.BatchResult, error) {
	var res lockv1.BatchResult
	var err error
	switch op := op.GetOperation().(type) {
	case *lockv1.BatchOperation_Acquire:
		if op.Acquire.GetWait().AsDuration() != 0 {
			err = server.InvalidField("wait", "a batched acquire cannot wait: send an acquire that waits as its own Acquire call")
			break
		}
		var r *lockv1.AcquireResponse
		if r, err = s.Acquire(ctx, op.Acquire); err == nil {
			res.Result = &lockv1.BatchResult_Acquire{Acquire: r}
		}
	case *lockv1.BatchOperation_Release:
		var r *lockv1.ReleaseResponse
		if r, err = s.Release(ctx, op.Release); err == nil {
			res.Result = &lockv1.BatchResult_Release{Release: r}
		}
	case *lockv1.BatchOperation_Renew:
		var r *lockv1.RenewResponse
		if r, err = s.Renew(ctx, op.Renew); err == nil {
			res.Result = &lockv1.BatchResult_Renew{Renew: r}
		}
	case *lockv1.BatchOperation_Inspect:
		var r *lockv1.InspectResponse
		if r, err = s.Inspect(ctx, op.Inspect); err == nil {
			res.Result = &lockv1.BatchResult_Inspect{Inspect: r}
		}
	default:
		err = server.InvalidField("operation", "none of acquire, release, renew and inspect is set")
	}
	if err != nil {
		code, msg := server.OperationError(ctx, err)
		res.Error = &lockv1.BatchError{Code: code.String(), Message: msg}
	}
	return &res, err
}
