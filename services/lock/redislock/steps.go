package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/libs/redisconf"
	"github.com/coordkit/coordkit/services/lock"
)

var _ lock.BatchBackend = (*Backend)(nil)

// RunSteps implements lock.BatchBackend: every step's script goes out in one pipeline, and
// each reply is read as the step's own method reads it.
func (b *Backend) RunSteps(ctx context.Context, steps []*lock.Step) {
	calls := make([]redisconf.ScriptCall, len(steps))
	for i, st := range steps {
		switch st.Kind {
		case lock.StepTryAcquire:
			calls[i] = b.acquireCall(st.Key, st.Owner, st.TTL)
		case lock.StepRelease:
			calls[i] = b.releaseCall(st.Key, st.Owner, st.Token)
		case lock.StepRenew:
			calls[i] = b.renewCall(st.Key, st.Owner, st.TTL)
		case lock.StepInspect:
			calls[i] = b.inspectCall(st.Key)
		default:
			panic(fmt.Sprintf("redislock: step of unknown kind %d", st.Kind))
		}
	}
	start := time.Now() // before anything is sent: leases end no earlier than start + ttl
	cmds := redisconf.RunScripts(ctx, b.rdb, calls)
	for i, st := range steps {
		switch st.Kind {
		case lock.StepTryAcquire:
			st.Attempt, st.Err = b.acquireReply(ctx, cmds[i], st.Key, st.Owner, start)
		case lock.StepRelease:
			st.Remaining, st.Released, st.Err = releaseReply(ctx, cmds[i])
		case lock.StepRenew:
			st.Lease, st.Err = renewReply(ctx, cmds[i], st.Key, st.Owner, start)
		case lock.StepInspect:
			st.State, st.Err = inspectReply(ctx, cmds[i])
		}
	}
}
