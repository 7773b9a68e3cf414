package event

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	connected       prometheus.Gauge
	publishFailures prometheus.Counter
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
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.publishFailures)
	}
	return m
}
