package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverNoop is the job River runs in `coordbench task`: nothing.
type riverNoop struct{}

// Kind implements river.JobArgs.
func (riverNoop) Kind() string { return "coordkit_bench_noop" }

// riverNoopWorker counts the jobs it starts and how long after their fetch each started.
type riverNoopWorker struct {
	river.WorkerDefaults[riverNoop]
	handled  atomic.Int64
	want     int64
	finished chan struct{}
	mu       sync.Mutex
	lat      []time.Duration
}

// Work implements river.Worker.
func (w *riverNoopWorker) Work(_ context.Context, job *river.Job[riverNoop]) error {
	if job.AttemptedAt != nil {
		d := time.Since(*job.AttemptedAt)
		w.mu.Lock()
		w.lat = append(w.lat, d)
		w.mu.Unlock()
	}
	if w.handled.Add(1) == w.want {
		close(w.finished)
	}
	return nil
}

// benchRiver runs River (riverqueue/river over pgx) on cfg.postgresURL, in the schema
// cfg.riverSchema (created, and migrated with rivermigrate, when missing; the run deletes
// its jobs afterwards and touches nothing else): it inserts cfg.tasks no-op jobs, then
// processes them with a client of cfg.workers workers. tasks/s is from the client's start
// until Stop returned after the last job (its completion written). The pick latency is
// River's fetch-to-start: from the job's attempted_at, which the fetch that locks it sets on
// the database clock, to its worker's start.
func benchRiver(ctx context.Context, cfg taskBenchConfig) (taskResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	r := taskResult{Target: "river/postgres", Count: cfg.workers}
	pc, err := pgxpool.ParseConfig(cfg.postgresURL)
	if err != nil {
		return r, fmt.Errorf("bench: river: --postgres-url: %w", err)
	}
	pc.MaxConns = 32 // as coordkit's postgres handle
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return r, fmt.Errorf("bench: river: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{cfg.riverSchema}.Sanitize()); err != nil {
		return r, fmt.Errorf("bench: river: schema %s: %w", cfg.riverSchema, err)
	}
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: cfg.riverSchema})
	if err != nil {
		return r, fmt.Errorf("bench: river: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return r, fmt.Errorf("bench: river: migrate: %w", err)
	}
	cleanup := func() error {
		_, err := pool.Exec(context.WithoutCancel(ctx), "DELETE FROM "+pgx.Identifier{cfg.riverSchema, "river_job"}.Sanitize()+" WHERE kind = $1", riverNoop{}.Kind())
		return err
	}
	if err := cleanup(); err != nil { // an earlier run that failed midway
		return r, fmt.Errorf("bench: river: %w", err)
	}
	defer cleanup()

	worker := &riverNoopWorker{want: int64(cfg.tasks), finished: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(driver, &river.Config{
		Schema:  cfg.riverSchema,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.workers}},
		Workers: workers,
		// River's fetch waits FetchCooldown (100ms by default) between fetches, which
		// bounds a backlog of no-op jobs to MaxWorkers per 100ms: its minimum lets it fetch
		// as fast as its workers free up.
		FetchCooldown:     river.FetchCooldownMin,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return r, fmt.Errorf("bench: river: %w", err)
	}

	var errs taskErrors
	start := time.Now()
	for from := 0; from < cfg.tasks; from += 1000 {
		params := make([]river.InsertManyParams, 0, 1000)
		for range min(1000, cfg.tasks-from) {
			params = append(params, river.InsertManyParams{Args: riverNoop{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return r, fmt.Errorf("bench: river: insert: %w", err)
		}
	}
	r.PutPerSec = float64(cfg.tasks) / time.Since(start).Seconds()

	start = time.Now()
	if err := client.Start(ctx); err != nil {
		return r, fmt.Errorf("bench: river: start: %w", err)
	}
	select {
	case <-worker.finished:
	case <-ctx.Done():
		errs.add(fmt.Errorf("river: %d of %d jobs handled: %w", worker.handled.Load(), cfg.tasks, context.Cause(ctx)))
	}
	if err := client.Stop(context.WithoutCancel(ctx)); err != nil {
		errs.add(fmt.Errorf("river: stop: %w", err))
	}
	took := time.Since(start)
	r.Tasks = int(min(worker.handled.Load(), int64(cfg.tasks)))
	r.TasksPerSec = float64(r.Tasks) / took.Seconds()
	worker.mu.Lock()
	lat := slices.Clone(worker.lat)
	worker.mu.Unlock()
	slices.Sort(lat)
	r.PickP50, r.PickP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	errs.into(&r)
	return r, nil
}

// addRiverRatios sets every run's ratio to River: its tasks/s over River's.
func addRiverRatios(results []taskResult) {
	addRatios(results, "river/postgres", func(r *taskResult, ratio float64) { r.RatioRiver = ratio })
}
