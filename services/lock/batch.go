package lock

import (
	"context"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// Batch implements LockServiceHandler. Every operation goes through the same checks and the
// same handling of its backend's answer as its single call, so each gets exactly the answer
// or error that call would. Operations on a BatchBackend go to it together, one round trip
// for all of them (the Redis engine: one pipeline; the SQL engines: set statements); the
// others run at once, one goroutine each, so the backends still see them together.
func (s *Service) Batch(ctx context.Context, req *lockv1.BatchRequest) (*lockv1.BatchResponse, error) {
	ops := req.GetOperations()
	if err := server.CheckBatch("operations", len(ops)); err != nil {
		return nil, err
	}
	results := make([]*lockv1.BatchResult, len(ops))
	failures := make([]error, len(ops))
	steps := make([]batchStep, len(ops))
	var alone, groups []*stepGroup // the groups run last: the last task runs on this goroutine
	for i, op := range ops {
		st := &steps[i]
		st.i = i
		if err := s.prepareStep(st, op); err != nil {
			results[i], failures[i] = failed(ctx, err), err
			continue
		}
		if bb, ok := st.b.(BatchBackend); ok {
			g := groupOf(&groups, st.name, bb)
			g.steps = append(g.steps, st)
		} else {
			alone = append(alone, &stepGroup{name: st.name, steps: []*batchStep{st}})
		}
	}
	// finish answers one step; a panic in it fails that operation alone, since every other
	// step of its group ran and deserves its own answer (an acquire's lease, a release's event).
	finish := func(st *batchStep) {
		defer func() {
			if p := recover(); p != nil {
				server.LogPanic(ctx, s.log, "lock", p)
				results[st.i] = failed(ctx, server.ErrPanic)
			}
		}()
		results[st.i], failures[st.i] = s.finishStep(ctx, st)
	}
	tasks := append(alone, groups...)
	server.RunBatch(len(tasks), func(t int) {
		tasks[t].run(ctx, s)
		for _, st := range tasks[t].steps {
			finish(st)
		}
	}, func(t int, p any) {
		server.LogPanic(ctx, s.log, "lock", p)
		for _, st := range tasks[t].steps { // the backend call panicked: none was answered
			results[st.i] = failed(ctx, server.ErrPanic)
		}
	})
	server.LogBatchFailures(ctx, s.log, "lock", failures)
	return &lockv1.BatchResponse{Results: results}, nil
}

// failed is the result of an operation that failed with err.
func failed(ctx context.Context, err error) *lockv1.BatchResult {
	code, msg := server.OperationError(ctx, err)
	return &lockv1.BatchResult{Error: &lockv1.BatchError{Code: code.String(), Message: msg}}
}
