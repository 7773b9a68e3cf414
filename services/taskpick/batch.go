package taskpick

import (
	"context"

	"github.com/coordkit/coordkit/libs/server"
	taskpickv1 "github.com/coordkit/coordkit/proto/gen/coordkit/taskpick/v1"
)

// Batch implements TaskPickServiceHandler: every operation runs at once through the same
// code as its single call, so each gets exactly the answer or error that call would, and the
// backends see them together (the Redis engine pipelines concurrent scripts into one round
// trip when opened on redisconf.Pipelined).
func (s *Service) Batch(ctx context.Context, req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
	ops := req.GetOperations()
	if err := server.CheckBatch("operations", len(ops)); err != nil {
		return nil, err
	}
	results := make([]*taskpickv1.BatchResult, len(ops))
	failures := make([]error, len(ops))
	server.RunBatch(len(ops), func(i int) { results[i], failures[i] = s.runOperation(ctx, ops[i]) }, func(i int, p any) {
		server.LogPanic(ctx, s.log, "taskpick", p)
		code, msg := server.OperationError(ctx, server.ErrPanic)
		results[i] = &taskpickv1.BatchResult{Error: &taskpickv1.BatchError{Code: code.String(), Message: msg}}
	})
	server.LogBatchFailures(ctx, s.log, "taskpick", failures)
	return &taskpickv1.BatchResponse{Results: results}, nil
}

// runOperation runs one operation of a batch and wraps its answer or error; it also returns
// the error, for the batch's log line.
func (s *Service) runOperation(ctx context.Context, op *taskpickv1.BatchOperation) (*taskpickv1.BatchResult, error) {
	var res taskpickv1.BatchResult
	var err error
	switch op := op.GetOperation().(type) {
	case *taskpickv1.BatchOperation_Put:
		var r *taskpickv1.PutResponse
		if r, err = s.Put(ctx, op.Put); err == nil {
			res.Result = &taskpickv1.BatchResult_Put{Put: r}
		}
	case *taskpickv1.BatchOperation_Ack:
		var r *taskpickv1.AckResponse
		if r, err = s.Ack(ctx, op.Ack); err == nil {
			res.Result = &taskpickv1.BatchResult_Ack{Ack: r}
		}
	case *taskpickv1.BatchOperation_Nack:
		var r *taskpickv1.NackResponse
		if r, err = s.Nack(ctx, op.Nack); err == nil {
			res.Result = &taskpickv1.BatchResult_Nack{Nack: r}
		}
	case *taskpickv1.BatchOperation_Extend:
		var r *taskpickv1.ExtendResponse
		if r, err = s.Extend(ctx, op.Extend); err == nil {
			res.Result = &taskpickv1.BatchResult_Extend{Extend: r}
		}
	case *taskpickv1.BatchOperation_Get:
		var r *taskpickv1.GetResponse
		if r, err = s.Get(ctx, op.Get); err == nil {
			res.Result = &taskpickv1.BatchResult_Get{Get: r}
		}
	default:
		err = server.InvalidField("operation", "none of put, ack, nack, extend and get is set")
	}
	if err != nil {
		code, msg := server.OperationError(ctx, err)
		res.Error = &taskpickv1.BatchError{Code: code.String(), Message: msg}
	}
	return &res, err
}
