package sqldb

import (
	"context"
	"math/rand/v2"
	"time"
)

// MaxDeadlockRetries bounds how often Retry runs a statement or transaction that the engine
// chose as a deadlock victim: InnoDB picks a victim whenever two writers of one row wait on
// each other, which racing calls on one task or key do under load.
const MaxDeadlockRetries = 16

// maxDeadlockPause bounds the pause before one run again.
const maxDeadlockPause = 20 * time.Millisecond

// Victim says whether err only means "chosen as a deadlock victim, nothing done", while ctx
// still allows another try: the statement or transaction may run again.
func (d Dialect) Victim(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && d.Deadlock != nil && d.Deadlock(err)
}

// Retry runs fn, and again while it fails as a deadlock victim (Victim), MaxDeadlockRetries
// times in all at most, and not once ctx has ended; it returns fn's last error. fn must be a
// statement run on its own (autocommit) or a whole transaction, so that a victim left
// nothing applied.
//
// Before each new run it pauses for a random time of up to 2 ms per run so far (at most
// 20 ms): InnoDB rolls back the transaction that has done the least, so a one-statement write
// racing transactions that lock many rows (picks, sweeps) is the victim again and again, and
// running it again at once only meets the next of them. 8 pickers, a sweeper and a requeuer
// on one pool for 8 s (TestRacingWritersOnMySQL's load): with 10 immediate runs, 0–47 writes
// per run still failed; with the pauses and 16 runs, none in 5 runs.
func (d Dialect) Retry(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if attempt == MaxDeadlockRetries || !d.Victim(ctx, err) {
			return err
		}
		pause := time.NewTimer(rand.N(min(time.Duration(2*attempt)*time.Millisecond, maxDeadlockPause)) + 1)
		select {
		case <-pause.C:
		case <-ctx.Done():
			pause.Stop()
			return err
		}
	}
}
