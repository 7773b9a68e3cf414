package lock

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the lock-specific Prometheus series, labelled by backend.
type metrics struct {
	acquires   *prometheus.CounterVec
	contention *prometheus.CounterVec
	waited     *prometheus.HistogramVec
	releases   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_acquire_total",
			Help: "Acquire calls by backend and result: acquired, reentered, busy (not acquired within wait) or error.",
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
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_lock_release_total",
			Help: "Release calls by backend and result: released, freed (last hold), or error.",
		}, []string{"backend", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.acquires, m.contention, m.waited, m.releases)
	}
	return m
}
