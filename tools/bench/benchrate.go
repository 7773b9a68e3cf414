package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// ratePickWait is how long one Pick of the rate run waits server-side for a token.
const ratePickWait = 5 * time.Second

// benchRateBackend measures a rate-limited pool on backend: a second service over the same
// store beside url's, a pool limited to cfg.rate tasks a second with a burst of cfg.rateBurst, and
// cfg.workers workers spread over the two picking one task at a time (waiting for tokens)
// and acking it for cfg.rateDuration. The result's tasks/s is the measured rate, from the
// first lease to the last; RateRatio is its ratio to the limit.
func benchRateBackend(ctx context.Context, cfg taskBenchConfig, url, backend, stamp string, stderr io.Writer) (taskResult, error) {
	r := taskResult{Target: fmt.Sprintf("rate%gb%d/%s", cfg.rate, cfg.rateBurst, backend), Count: 1, RateLimit: cfg.rate}
	url2, stop, err := startTaskService(ctx, cfg, backend, stamp)
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	clients := []*client.Client{client.New(url), client.New(url2)}
	pool := fmt.Sprintf("bench-%s-%s-rate", stamp, backend)
	var errs taskErrors
	if _, err := clients[0].Pool(backend, pool).SetSettings(ctx, client.PoolSettings{Rate: cfg.rate, Burst: uint32(cfg.rateBurst)}); err != nil {
		return r, errors.Join(fmt.Errorf("bench: %s: set rate: %w", backend, err), stop())
	}
	// More tasks than the limit lets through in the run, so that the pool never runs dry.
	put := cfg
	put.tasks = int(cfg.rate*cfg.rateDuration.Seconds()*1.5) + 100
	r.PutPerSec = float64(put.tasks) / putTasks(ctx, put, clients[0].Tasks(), backend, pool, &errs).Seconds()

	// Cancelled, not a deadline: a deadline would reach the waiting Picks, and they would end
	// with deadline_exceeded.
	runCtx, stopRun := context.WithCancel(ctx)
	defer time.AfterFunc(cfg.rateDuration, stopRun).Stop()
	leased := make([][]time.Time, cfg.workers)
	wait, ttl := durationpb.New(ratePickWait), durationpb.New(taskBenchTTL)
	var wg sync.WaitGroup
	for w := range cfg.workers {
		tasks := clients[w%len(clients)].Tasks()
		wg.Go(func() {
			for runCtx.Err() == nil {
				res, err := tasks.Pick(runCtx, &taskpickv1.PickRequest{Backend: backend, Pool: pool, Count: 1, Ttl: ttl, Wait: wait})
				if err != nil {
					if runCtx.Err() == nil {
						errs.add(fmt.Errorf("pick: %w", err))
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				for _, t := range res.GetTasks() {
					leased[w] = append(leased[w], time.Now())
					if _, err := tasks.Ack(ctx, &taskpickv1.AckRequest{Backend: backend, Pool: pool, Id: t.GetId(),
						LeaseToken: t.GetLeaseToken(), LeaseSecret: t.GetLeaseSecret()}); err != nil {
						errs.add(fmt.Errorf("ack: %w", err))
					}
				}
			}
		})
	}
	wg.Wait()
	all := slices.Concat(leased...)
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	r.Tasks = len(all)
	// The first lease takes the full bucket's tokens at once; the rest come at the rate.
	if len(all) > cfg.rateBurst {
		r.TasksPerSec = float64(len(all)-cfg.rateBurst) / all[len(all)-1].Sub(all[0]).Seconds()
		r.RateRatio = r.TasksPerSec / cfg.rate
	}
	errs.into(&r)
	fmt.Fprintf(stderr, "bench: %s: %d leases in %v through 2 services, %.1f tasks/s, %.3f× the limit %g/s (burst %d)\n",
		r.Target, r.Tasks, cfg.rateDuration, r.TasksPerSec, r.RateRatio, cfg.rate, cfg.rateBurst)
	return r, stop()
}
