package idgen

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/libs/server"
)

// metrics are the ID-specific Prometheus series, labelled by mode.
type metrics struct {
	issued *prometheus.CounterVec
	errors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_idgen_ids_total",
			Help: "IDs issued, by mode.",
		}, []string{"mode"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_idgen_errors_total",
			Help: "Valid Next calls that failed in their engine (store down, lease lost, unknown tag), by mode.",
		}, []string{"mode"}),
	}
	server.Register(reg, m.issued, m.errors)
	return m
}
