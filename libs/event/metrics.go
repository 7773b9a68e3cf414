package event

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	connected       prometheus.Gauge
	publishFailures prometheus.Counter
	rejected        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coordkit_events_connected",
			Help: "1 while NATS is reachable (waiters are pushed awake), 0 while it is not (they poll).",
		}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coordkit_events_publish_failures_total",
			Help: "Events that could not be published or buffered for NATS.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coordkit_events_rejected_total",
			Help: "Messages a subscription dropped: unsigned or bad_signature (not signed with the events key), stale (sent outside the signature window), replayed (a copy of one already delivered) or sender_limit (one per subscription that received it).",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.publishFailures, m.rejected)
	}
	return m
}
