package server

import "github.com/prometheus/client_golang/prometheus"

// Register registers a service's collectors with reg; a nil reg keeps them unregistered
// (tests, and services built without a server).
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) {
	if reg != nil {
		reg.MustRegister(cs...)
	}
}

// Failure is the result label of a failed call: canceled when it ended without a fault of
// the service (the caller canceled, its deadline passed, the server shut down), error when a
// backend or the request failed.
func Failure(err error) string {
	if Ended(err) {
		return "canceled"
	}
	return "error"
}
