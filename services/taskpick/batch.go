package taskpick

import (
	"context"
	"fmt"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// Batch implements TaskPickServiceHandler: every operation runs at once through the same
// code as its single call, so each gets exactly the answer or error that call would, and the
// backends see them together (the Redis engine pipelines concurrent scripts into one round
// trip when opened on redisconf.Pipelined). The one exception is the answer's size: the Gets
// share what the answer has left (batchBudget), and one whose task does not fit answers
// resource_exhausted.
func (s *Service) Batch(ctx context.Context, req *taskpickv1.BatchRequest) (*taskpickv1.BatchResponse, error) {
	ops := req.GetOperations()
	if err := server.CheckBatch("operations", len(ops)); err != nil {
		return nil, err
	}
	results := make([]*taskpickv1.BatchResult, len(ops))
	failures := make([]error, len(ops))
	budget := s.newBatchBudget(ops)
	server.RunBatch(len(ops), func(i int) { results[i], failures[i] = s.runOperation(ctx, ops[i], budget) }, func(i int, p any) {
		server.LogPanic(ctx, s.log, "taskpick", p)
		code, msg := server.OperationError(ctx, server.ErrPanic)
		results[i] = &taskpickv1.BatchResult{Error: &taskpickv1.BatchError{Code: code.String(), Message: msg}}
	})
	server.LogBatchFailures(ctx, s.log, "taskpick", failures)
	return &taskpickv1.BatchResponse{Results: results}, nil
}

// batchReads bounds how many Gets of one batch read at once: with the answer's budget it
// bounds the payloads a batch holds in memory (at most this many beyond its answer), while
// enough stay in flight for a pipelining backend to pay few round trips.
const batchReads = 32

// opReserve is what every operation's answer is reserved before any runs, besides 6 bytes
// per task a Put carries: a small result, or an error's code and message. A Get's task comes
// out of what is left.
const opReserve = 1 << 10

// batchBudget is what is left of one Batch answer for its Gets' tasks, the only answers that
// grow with stored data. Every operation's small answer is reserved before any runs, since
// the operations that change state must always be answered, and a refused Get still answers
// its error.
type batchBudget struct {
	left atomic.Int64
	// full is set by the first Get that did not fit: the Gets after it answer at once,
	// without reading a task they would most likely have to drop.
	full  atomic.Bool
	reads chan struct{}
}

// errAnswerFull answers a Get of a batch whose answer has no room left for its task.
var errAnswerFull = server.NewError(connect.CodeResourceExhausted, "taskpick: the batch's answer is full")

func (s *Service) newBatchBudget(ops []*taskpickv1.BatchOperation) *batchBudget {
	reserved := answerSlack
	for _, op := range ops {
		reserved += reserve(op)
	}
	b := &batchBudget{reads: make(chan struct{}, batchReads)}
	b.left.Store(int64(s.maxAnswer - reserved))
	return b
}

// get runs a batch's Get within the budget: it reads only while the answer has room, and
// answers resource_exhausted, changing nothing, when the task does not fit in what is left.
func (s *Service) get(ctx context.Context, req *taskpickv1.GetRequest, budget *batchBudget) (*taskpickv1.GetResponse, error) {
	select {
	case budget.reads <- struct{}{}:
	case <-ctx.Done():
		return nil, server.Error(ctx, context.Cause(ctx))
	}
	defer func() { <-budget.reads }()
	if budget.full.Load() || budget.left.Load() < TaskOverheadBytes {
		return nil, answerFull(s.maxAnswer)
	}
	r, err := s.Get(ctx, req)
	if err != nil {
		return nil, err
	}
	t := r.GetTask()
	cost := int64(AnswerBytes(len(t.GetPayload()), len(t.GetId())+len(t.GetLastError())))
	if budget.left.Add(-cost) < 0 {
		budget.left.Add(cost)
		budget.full.Store(true)
		return nil, answerFull(s.maxAnswer)
	}
	return r, nil
}

func answerFull(limit int) error {
	return fmt.Errorf("%w: this Get's task does not fit in the %d bytes a batch answers; send it again, or alone", errAnswerFull, limit)
}

// reserve is what op's answer is reserved before any operation runs.
func reserve(op *taskpickv1.BatchOperation) int { return opReserve + 24*len(op.GetPut().GetTasks()) }

// uniqueReserve is what a Put's answer may need beyond reserve: the id of a task holding
// the key of each of its tasks with a unique key. It comes out of what the answer has left
// when the Put runs, as a Get's task does.
func uniqueReserve(op *taskpickv1.BatchOperation) int {
	n := 0
	for _, t := range op.GetPut().GetTasks() {
		n += putTaskBytes(t) - 24
	}
	return n
}

// errPutAnswerFull answers a Put of a batch whose answer has no room left for the ids its
// tasks with unique keys might answer.
func putAnswerFull(limit int) error {
	return fmt.Errorf("%w: this Put's tasks with unique keys might not fit in the %d bytes a batch answers; send it again, or alone", errAnswerFull, limit)
}

// resultBytes bounds a result's size in either encoding, as AnswerBytes does a task's.
func resultBytes(r *taskpickv1.BatchResult) int { return 6*proto.Size(r) + 16 }

// runOperation runs one operation of a batch and wraps its answer or error; it also returns
// the error, for the batch's log line.
func (s *Service) runOperation(ctx context.Context, bop *taskpickv1.BatchOperation, budget *batchBudget) (*taskpickv1.BatchResult, error) {
	var res taskpickv1.BatchResult
	var err error
	var held int64 // a Put's uniqueReserve, given back once its answer's size is charged
	switch op := bop.GetOperation().(type) {
	case *taskpickv1.BatchOperation_Put:
		if extra := int64(uniqueReserve(bop)); extra > 0 {
			if budget.left.Add(-extra) < 0 {
				budget.left.Add(extra)
				err = putAnswerFull(s.maxAnswer)
				break
			}
			held = extra
		}
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
		if r, err = s.get(ctx, op.Get, budget); err == nil {
			res.Result = &taskpickv1.BatchResult_Get{Get: r}
		}
	default:
		err = server.InvalidField("operation", "none of put, ack, nack, extend and get is set")
	}
	if err != nil {
		code, msg := server.OperationError(ctx, err)
		res.Error = &taskpickv1.BatchError{Code: code.String(), Message: msg}
	}
	if bop.GetGet() == nil || res.Error != nil {
		// An answer beyond its reserve (a long error message, a duplicate's holder id)
		// leaves the Gets less.
		if over := resultBytes(&res) - reserve(bop); over > 0 {
			budget.left.Add(-int64(over))
		}
	}
	budget.left.Add(held)
	return &res, err
}
