package lock

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/libs/server"
)

// metrics are the lock-specific Prometheus series, labelled by backend.
type metrics struct {
	acquires     *prometheus.CounterVec
	contention   *prometheus.CounterVec
	waited       *prometheus.HistogramVec
	retries      *prometheus.CounterVec
	waitAttempts *prometheus.GaugeVec
	releases     *prometheus.CounterVec
	// waiterAttempts and wakeups show what a release costs: attempts of woken waiters per
	// freed lock.
	waiterAttempts *prometheus.CounterVec
	wakeups        *prometheus.CounterVec
	// watchLagged counts Watch streams ended because they fell a full queue behind.
	watchLagged *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_acquire_total",
			Help: "Acquire calls by backend and result: acquired, reentered, busy (not acquired within wait), " +
				"canceled (the caller canceled, its deadline passed or the server shut down) or error.",
		}, []string{"backend", "result"}),
		contention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_contention_total",
			Help: "Acquire attempts that found the lock held by another owner.",
		}, []string{"backend"}),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordkit_lock_wait_seconds",
			Help:    "Time Acquire calls that had to wait spent waiting, whatever their outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"backend"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_wait_retries_total",
			Help: "Backend failures that waiting Acquire calls retried within their wait instead of failing.",
		}, []string{"backend"}),
		waitAttempts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coordkit_lock_wait_attempts_in_flight",
			Help: "Backend attempts of waiting Acquire calls (after their first) in flight; at most WaitAttempts per backend.",
		}, []string{"backend"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_release_total",
			Help: "Release calls by backend and result: released, freed (last hold), canceled or error.",
		}, []string{"backend", "result"}),
		waiterAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_waiter_attempts_total",
			Help: "Backend attempts of waiting Acquire calls after their first. Divided by coordkit_lock_release_total{result=\"freed\"} " +
				"it is what a release costs in attempts: about one per instance with waiters while events flow.",
		}, []string{"backend"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_wakeups_total",
			Help: "Waiters woken to try again, by cause: event (a release or expiry on NATS), local (a release by this instance), " +
				"expiry (the holder's lease ran out), recheck (the periodic check of the first waiter).",
		}, []string{"backend", "cause"}),
		watchLagged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_watch_lagged_total",
			Help: "Watch streams ended with resource_exhausted because they fell a full queue of events behind.",
		}, []string{"backend"}),
	}
	server.Register(reg, m.acquires, m.contention, m.waited, m.retries, m.waitAttempts, m.releases, m.waiterAttempts, m.wakeups, m.watchLagged)
	return m
}
