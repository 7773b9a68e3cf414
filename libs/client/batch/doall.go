package batch

import "context"

// DoAll sends reqs, which the caller already holds together, and returns each one's result
// in order. When a sending slot is free, nothing is queued and reqs fit in one batch, they
// leave at once as one batch on the caller's goroutine, with ctx itself (a panic in send
// then reaches the caller, as in Do's lone call). Otherwise they queue like as many Do calls
// and leave with the batches behind those in flight, so a caller holding many operations
// takes no more sending slots than one that holds one. When ctx ends first, the operations
// still queued are never sent and get its cause, as in Do.
func (c *Coalescer[Req, Res]) DoAll(ctx context.Context, reqs []Req) []Result[Res] {
	results := make([]Result[Res], len(reqs))
	if len(reqs) == 0 {
		return results
	}
	if ctx.Err() != nil {
		for i := range results {
			results[i].Err = context.Cause(ctx)
		}
		return results
	}
	c.mu.Lock()
	if c.inFlight < c.maxInFlight && len(c.pending) == 0 && len(reqs) <= c.maxBatch {
		c.inFlight++
		c.mu.Unlock()
		defer c.releaseSlot()
		return c.sendAll(ctx, reqs)
	}
	calls := make([]*call[Req, Res], len(reqs))
	for i, req := range reqs {
		calls[i] = &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	}
	c.pending = append(c.pending, calls...)
	start := c.inFlight < c.maxInFlight
	if start {
		c.inFlight++
	}
	c.mu.Unlock()
	if start {
		go c.run()
	}
	for i, cl := range calls {
		results[i].Value, results[i].Err = c.wait(ctx, cl)
	}
	return results
}
