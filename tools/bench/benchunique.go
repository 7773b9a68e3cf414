package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// uniqueKeyOf is the unique key of the i-th Put of a unique run: every key is put twice, so
// half the Puts are duplicates.
func uniqueKeyOf(i int) string { return "k" + strconv.Itoa(i/2) }

// uniquePutRun has cfg.workers goroutines put cfg.tasks single tasks with unique keys
// (UNIQUE_SCOPE_ACTIVE), each key twice, so half are duplicates answered with the task
// holding the key. put/s counts every Put, duplicates included; tasks is how many were added.
func uniquePutRun(ctx context.Context, cfg taskBenchConfig, tasks taskpickv1connect.TaskPickServiceClient, backend, pool string) taskResult {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	r := taskResult{Count: 1}
	var errs taskErrors
	var next, created atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < cfg.tasks && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				resp, err := tasks.Put(ctx, &taskpickv1.PutRequest{Backend: backend, Pool: pool, Tasks: []*taskpickv1.NewTask{{
					Id: "t" + strconv.Itoa(i), UniqueKey: uniqueKeyOf(i), UniqueScope: taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE,
				}}})
				switch {
				case err != nil:
					errs.add(fmt.Errorf("unique put: %w", err))
				case resp.GetCreated()[0]:
					created.Add(1)
				case len(resp.GetDuplicate()) != 1 || !resp.GetDuplicate()[0]:
					errs.add(errors.New("unique put: neither created nor a duplicate"))
				}
			}
		})
	}
	wg.Wait()
	r.PutPerSec = float64(cfg.tasks) / time.Since(start).Seconds()
	r.Tasks = int(created.Load())
	if want := (cfg.tasks + 1) / 2; r.Tasks != want {
		errs.add(fmt.Errorf("unique put: %d tasks added for %d keys", r.Tasks, want))
	}
	errs.into(&r)
	return r
}

// benchAsynqUnique enqueues cfg.tasks tasks into asynq with asynq.Unique, each payload (what
// asynq's uniqueness is by) twice, from cfg.workers goroutines, into Redis database
// cfg.asynqDB (flushed before and after): the peer of uniquePutRun. asynq answers a
// duplicate with ErrDuplicateTask, not the task that holds the lock.
func benchAsynqUnique(ctx context.Context, cfg taskBenchConfig) (taskResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	r := taskResult{Target: "asynq-unique/redis", Count: 1}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr, DB: cfg.asynqDB})
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return r, fmt.Errorf("bench: asynq: flush Redis db %d: %w", cfg.asynqDB, err)
	}
	defer rdb.FlushDB(context.WithoutCancel(ctx))
	cl := asynq.NewClient(asynq.RedisClientOpt{Addr: cfg.redisAddr, DB: cfg.asynqDB, PoolSize: max(cfg.workers, 10)})
	defer cl.Close()
	var errs taskErrors
	var next, created atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < cfg.tasks && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				_, err := cl.EnqueueContext(ctx, asynq.NewTask("bench:unique", []byte(uniqueKeyOf(i))), asynq.Unique(time.Hour))
				switch {
				case err == nil:
					created.Add(1)
				case !errors.Is(err, asynq.ErrDuplicateTask):
					errs.add(fmt.Errorf("enqueue unique: %w", err))
				}
			}
		})
	}
	wg.Wait()
	r.PutPerSec = float64(cfg.tasks) / time.Since(start).Seconds()
	r.Tasks = int(created.Load())
	errs.into(&r)
	return r, nil
}

// addUniqueRatios sets the ratio of every unique-put run: its put/s over asynq's unique
// enqueues (the tasks/s ratios do not apply: nothing is picked).
func addUniqueRatios(results []taskResult) {
	base := 0.0
	for _, r := range results {
		if r.Target == "asynq-unique/redis" {
			base = r.PutPerSec
		}
	}
	for i := range results {
		if strings.HasPrefix(results[i].Target, "unique-put/") || results[i].Target == "asynq-unique/redis" {
			results[i].Ratio = 0
			if base > 0 {
				results[i].Ratio = results[i].PutPerSec / base
			}
		}
	}
}
