package lock

import (
	"context"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// batchStep is one operation of a Batch, checked and ready for its backend: the Step it takes
// there and what its single call's handler needs to answer it.
type batchStep struct {
	i    int // its place in the batch
	name string
	b    Backend
	acq  acquireCall // StepTryAcquire
	own  ownedCall   // the other kinds
	step Step
}

// prepareStep checks op as its single call would and fills in st; an error is the
// operation's answer.
func (s *Service) prepareStep(st *batchStep, op *lockv1.BatchOperation) error {
	var err error
	switch op := op.GetOperation().(type) {
	case *lockv1.BatchOperation_Acquire:
		if op.Acquire.GetWait().AsDuration() != 0 {
			return server.InvalidField("wait", "a batched acquire cannot wait: send an acquire that waits as its own Acquire call")
		}
		if st.acq, err = s.prepareAcquire(op.Acquire); err != nil {
			return err
		}
		p := st.acq.p
		st.name, st.b = st.acq.name, st.acq.b
		st.step = Step{Kind: StepTryAcquire, Key: p.key, Owner: p.owner, TTL: p.ttl}
		return nil
	case *lockv1.BatchOperation_Release:
		st.own, err = s.prepareRelease(op.Release)
		st.step = Step{Kind: StepRelease, Key: st.own.key, Owner: st.own.owner, Token: st.own.token}
	case *lockv1.BatchOperation_Renew:
		st.own, err = s.prepareRenew(op.Renew)
		st.step = Step{Kind: StepRenew, Key: st.own.key, Owner: st.own.owner, TTL: st.own.ttl}
	case *lockv1.BatchOperation_Inspect:
		st.own, err = s.prepareInspect(op.Inspect)
		st.step = Step{Kind: StepInspect, Key: st.own.key}
	default:
		return server.InvalidField("operation", "none of acquire, release, renew and inspect is set")
	}
	st.name, st.b = st.own.name, st.own.b
	return err
}

// runAlone takes st's step through its backend's own method, as its single call does.
func (s *Service) runAlone(ctx context.Context, st *batchStep) {
	step := &st.step
	switch step.Kind {
	case StepTryAcquire:
		step.Attempt, step.Err = s.acquire(ctx, st.name, st.b, st.acq.p)
	case StepRelease:
		step.Remaining, step.Released, step.Err = st.b.Release(ctx, step.Key, step.Owner, step.Token)
	case StepRenew:
		step.Lease, step.Err = st.b.Renew(ctx, step.Key, step.Owner, step.TTL)
	case StepInspect:
		step.State, step.Err = st.b.Inspect(ctx, step.Key)
	}
}

// finishStep answers st after its step ran, through its single call's handling of the
// backend's answer; it also returns the operation's error, for the batch's log line.
func (s *Service) finishStep(ctx context.Context, st *batchStep) (*lockv1.BatchResult, error) {
	var res lockv1.BatchResult
	var err error
	step := &st.step
	switch step.Kind {
	case StepTryAcquire:
		var r *lockv1.AcquireResponse
		if r, err = s.finishAcquire(ctx, st.acq, step.Attempt, step.Err); err == nil {
			res.Result = &lockv1.BatchResult_Acquire{Acquire: r}
		}
	case StepRelease:
		var r *lockv1.ReleaseResponse
		if r, err = s.finishRelease(ctx, st.own, step.Remaining, step.Released, step.Err); err == nil {
			res.Result = &lockv1.BatchResult_Release{Release: r}
		}
	case StepRenew:
		var r *lockv1.RenewResponse
		if r, err = s.finishRenew(ctx, st.own, step.Lease, step.Err); err == nil {
			res.Result = &lockv1.BatchResult_Renew{Renew: r}
		}
	case StepInspect:
		var r *lockv1.InspectResponse
		if r, err = finishInspect(ctx, st.own, step.State, step.Err); err == nil {
			res.Result = &lockv1.BatchResult_Inspect{Inspect: r}
		}
	}
	if err != nil {
		return failed(ctx, err), err
	}
	return &res, nil
}

// stepGroup is the steps of a batch on one BatchBackend, or a single step on a backend that
// is not one (b nil).
type stepGroup struct {
	name  string
	b     BatchBackend
	steps []*batchStep
}

// groupOf returns the group of backend name in *groups, adding it when it is new.
func groupOf(groups *[]*stepGroup, name string, b BatchBackend) *stepGroup {
	for _, g := range *groups {
		if g.name == name {
			return g
		}
	}
	g := &stepGroup{name: name, b: b}
	*groups = append(*groups, g)
	return g
}

// run hands the group's steps to its backend together, or runs a lone step alone. A first
// attempt that finds the lock held counts as contention, as acquire counts it.
func (g *stepGroup) run(ctx context.Context, s *Service) {
	if g.b == nil {
		s.runAlone(ctx, g.steps[0])
		return
	}
	steps := make([]*Step, len(g.steps))
	for i, st := range g.steps {
		steps[i] = &st.step
	}
	g.b.RunSteps(ctx, steps)
	for _, st := range steps {
		if st.Kind == StepTryAcquire && st.Err == nil && !st.Attempt.Acquired {
			s.metrics.contention.WithLabelValues(g.name).Inc()
		}
	}
}
