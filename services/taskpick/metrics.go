package taskpick

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/libs/server"
)

// metrics are the task-pick Prometheus series, labelled by backend. They count tasks and
// waits, what the RPC metrics (coordkit_rpc_requests_total, one per call by procedure and
// code) cannot tell: how many tasks a call moved, what became of them, how long picks waited.
type metrics struct {
	tasks     *prometheus.CounterVec
	recovered *prometheus.CounterVec
	waited    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_taskpick_tasks_total",
			Help: "Tasks by what happened to them: put (new), exists (Put of an existing id), duplicate (Put whose unique key another task holds), picked, acked, nacked, died (Nack on the last attempt), requeued, scheduled (put by a schedule's tick).",
		}, []string{"backend", "event"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_taskpick_recovered_total",
			Help: "Expired leases recovered by this instance's sweeps: available (back in the pool) or dead (it was the last attempt).",
		}, []string{"backend", "result"}),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordkit_taskpick_pick_wait_seconds",
			Help:    "Time waiting Picks that found no task at first spent waiting, whatever their outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"backend"}),
	}
	server.Register(reg, m.tasks, m.recovered, m.waited)
	return m
}
