package taskpick

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/libs/server"
)

// metrics are the task-pick Prometheus series, labelled by backend.
type metrics struct {
	tasks     *prometheus.CounterVec
	calls     *prometheus.CounterVec
	recovered *prometheus.CounterVec
	waited    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_task_tasks_total",
			Help: "Tasks by what happened to them: put (new), exists (Put of an existing id), picked, acked, nacked, died (Nack on the last attempt), requeued.",
		}, []string{"backend", "event"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_task_calls_total",
			Help: "Calls by backend, method and result: ok, stale (token not the current lease), not_found, canceled or error.",
		}, []string{"backend", "method", "result"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_task_recovered_total",
			Help: "Expired leases recovered by this instance's sweeps: available (back in the pool) or dead (it was the last attempt).",
		}, []string{"backend", "result"}),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coordkit_task_pick_wait_seconds",
			Help:    "Time waiting Picks that found no task at first spent waiting, whatever their outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"backend"}),
	}
	server.Register(reg, m.tasks, m.calls, m.recovered, m.waited)
	return m
}

// result is the result label of a call's error.
func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case err == ErrStaleLease:
		return "stale"
	case err == ErrNotFound:
		return "not_found"
	}
	return server.Failure(err)
}
