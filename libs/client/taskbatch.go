package client

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// taskBatchLimit caps the operations of one Batch call the SDK sends, as lockBatchLimit does;
// batchBytes keeps a batch of large Puts inside the service's request limit.
const taskBatchLimit = 256

// batchingTasks is the task-pick API that sends concurrent calls together, the way
// batchingLocks does for locks: a Put, Ack, Nack, Extend or Get made while another is in
// flight leaves with every call that queued meanwhile, as one Batch request, and one made
// when nothing is in flight goes out at once as its own call. So the Acks and Extends of a
// Work pool share round trips. Pick (which may wait server-side) and the admin calls
// (Stats, ListDead, Requeue) always go out alone. Every method answers exactly what the
// unary call would, errors included.
type batchingTasks struct {
	taskpickv1connect.TaskPickServiceClient
	calls *batchCalls[*taskpickv1.BatchOperation, *taskpickv1.BatchResult]
}

var _ taskpickv1connect.TaskPickServiceClient = (*batchingTasks)(nil)

// newBatchingTasks wraps raw; maxInFlight is how many requests may be in flight before
// calls start to queue into batches.
func newBatchingTasks(raw taskpickv1connect.TaskPickServiceClient, maxInFlight int) *batchingTasks {
	b := &batchingTasks{TaskPickServiceClient: raw}
	b.calls = newBatchCalls(maxInFlight, taskBatchLimit, b.batch, b.unary)
	return b
}

// batch sends ops as one Batch call.
func (b *batchingTasks) batch(ctx context.Context, ops []*taskpickv1.BatchOperation) ([]*taskpickv1.BatchResult, error) {
	res, err := b.TaskPickServiceClient.Batch(ctx, &taskpickv1.BatchRequest{Operations: ops})
	return res.GetResults(), err
}

// unary sends op as its own call and wraps the answer as a batch result.
func (b *batchingTasks) unary(ctx context.Context, op *taskpickv1.BatchOperation) (*taskpickv1.BatchResult, error) {
	var res taskpickv1.BatchResult
	switch op := op.GetOperation().(type) {
	case *taskpickv1.BatchOperation_Put:
		r, err := b.TaskPickServiceClient.Put(ctx, op.Put)
		if err != nil {
			return nil, err
		}
		res.Result = &taskpickv1.BatchResult_Put{Put: r}
	case *taskpickv1.BatchOperation_Ack:
		r, err := b.TaskPickServiceClient.Ack(ctx, op.Ack)
		if err != nil {
			return nil, err
		}
		res.Result = &taskpickv1.BatchResult_Ack{Ack: r}
	case *taskpickv1.BatchOperation_Nack:
		r, err := b.TaskPickServiceClient.Nack(ctx, op.Nack)
		if err != nil {
			return nil, err
		}
		res.Result = &taskpickv1.BatchResult_Nack{Nack: r}
	case *taskpickv1.BatchOperation_Extend:
		r, err := b.TaskPickServiceClient.Extend(ctx, op.Extend)
		if err != nil {
			return nil, err
		}
		res.Result = &taskpickv1.BatchResult_Extend{Extend: r}
	case *taskpickv1.BatchOperation_Get:
		r, err := b.TaskPickServiceClient.Get(ctx, op.Get)
		if err != nil {
			return nil, err
		}
		res.Result = &taskpickv1.BatchResult_Get{Get: r}
	default:
		return nil, errors.New("client: empty batch operation")
	}
	return &res, nil
}

// do sends op through the coalescer and unwraps its own error.
func (b *batchingTasks) do(ctx context.Context, op *taskpickv1.BatchOperation) (*taskpickv1.BatchResult, error) {
	r, err := b.calls.do(ctx, op)
	if err != nil {
		return nil, err
	}
	if e := r.GetError(); e != nil {
		return nil, operationError(e)
	}
	return r, nil
}

// Put implements taskpickv1connect.TaskPickServiceClient.
func (b *batchingTasks) Put(ctx context.Context, req *taskpickv1.PutRequest) (*taskpickv1.PutResponse, error) {
	r, err := b.do(ctx, &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Put{Put: req}})
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		// The batch it went out in had no room left in its answer for the ids its tasks with
		// unique keys might answer (nothing was put); alone, a Put the service accepts fits.
		return b.TaskPickServiceClient.Put(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	if r.GetPut() == nil {
		return nil, mismatch("put", r.GetResult())
	}
	return r.GetPut(), nil
}

// Ack implements taskpickv1connect.TaskPickServiceClient.
func (b *batchingTasks) Ack(ctx context.Context, req *taskpickv1.AckRequest) (*taskpickv1.AckResponse, error) {
	r, err := b.do(ctx, &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Ack{Ack: req}})
	if err != nil {
		return nil, err
	}
	if r.GetAck() == nil {
		return nil, mismatch("ack", r.GetResult())
	}
	return r.GetAck(), nil
}

// Nack implements taskpickv1connect.TaskPickServiceClient.
func (b *batchingTasks) Nack(ctx context.Context, req *taskpickv1.NackRequest) (*taskpickv1.NackResponse, error) {
	r, err := b.do(ctx, &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Nack{Nack: req}})
	if err != nil {
		return nil, err
	}
	if r.GetNack() == nil {
		return nil, mismatch("nack", r.GetResult())
	}
	return r.GetNack(), nil
}

// Extend implements taskpickv1connect.TaskPickServiceClient.
func (b *batchingTasks) Extend(ctx context.Context, req *taskpickv1.ExtendRequest) (*taskpickv1.ExtendResponse, error) {
	r, err := b.do(ctx, &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Extend{Extend: req}})
	if err != nil {
		return nil, err
	}
	if r.GetExtend() == nil {
		return nil, mismatch("extend", r.GetResult())
	}
	return r.GetExtend(), nil
}

// Get implements taskpickv1connect.TaskPickServiceClient.
func (b *batchingTasks) Get(ctx context.Context, req *taskpickv1.GetRequest) (*taskpickv1.GetResponse, error) {
	r, err := b.do(ctx, &taskpickv1.BatchOperation{Operation: &taskpickv1.BatchOperation_Get{Get: req}})
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		// The batch it went out in had no room left in its answer for this task (other Gets
		// filled it); alone, one task always fits.
		return b.TaskPickServiceClient.Get(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	if r.GetGet() == nil {
		return nil, mismatch("get", r.GetResult())
	}
	return r.GetGet(), nil
}
