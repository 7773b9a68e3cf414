package service

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/coordkit/coordkit/libs/server"
)

// DefaultBackend is the backend that a service's requests naming none use: configured when
// set, else the first of preference that backends has, else the only backend there is; ""
// when none of these applies. A configured name that backends lacks is an error naming them.
func DefaultBackend[B any](backends map[string]B, configured string, preference ...string) (string, error) {
	if configured != "" {
		if _, ok := backends[configured]; !ok {
			return "", fmt.Errorf("default backend %q is not configured (configured: %s)", configured, BackendNames(backends))
		}
		return configured, nil
	}
	for _, name := range preference {
		if _, ok := backends[name]; ok {
			return name, nil
		}
	}
	if len(backends) == 1 {
		for name := range backends {
			return name, nil
		}
	}
	return "", nil
}

// ResolveBackend is the backend a request names, or def when it names none: invalid_argument
// naming the field "backend" when there is no such backend.
func ResolveBackend[B any](backends map[string]B, def, name string) (string, B, error) {
	if name == "" {
		name = def
	}
	b, ok := backends[name]
	if !ok {
		if name == "" {
			return "", b, server.InvalidField("backend", "must be set: this instance has several (%s) and no default", BackendNames(backends))
		}
		return "", b, server.InvalidField("backend", "%s is not configured on this instance (configured: %s)", server.Quote(name), BackendNames(backends))
	}
	return name, b, nil
}

// BackendNames lists backends' names, sorted and comma-separated.
func BackendNames[B any](backends map[string]B) string {
	return strings.Join(slices.Sorted(maps.Keys(backends)), ", ")
}

// BackendChecks makes one health check per backend from probe, a cheap read that reaches the
// backend and changes nothing (Mounted.Checks).
func BackendChecks[B any](backends map[string]B, probe func(context.Context, B) error) map[string]server.Check {
	out := make(map[string]server.Check, len(backends))
	for name, b := range backends {
		out[name] = func(ctx context.Context) error { return probe(ctx, b) }
	}
	return out
}
