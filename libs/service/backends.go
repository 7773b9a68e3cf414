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

// Backend is one backend a service can run on, an entry of the service's backend list
// (`<svc>service.Backends`): the list is the one place that says which backends there are,
// how each opens on Deps and cfg (the service's Config), and, by its order, which one is
// the default when no flag names one.
type Backend[B comparable, C any] struct {
	// Name is the backend's name in requests, health checks and the startup log.
	Name string
	// Flag is the flag that enables or configures the backend ("--redis-url"): the errors
	// of Open name it, so that an operator knows what to fix.
	Flag string
	// Open opens the backend on deps and cfg. It returns the zero B (and a nil close) when
	// deps and cfg do not enable it; otherwise close, when not nil, releases what Open
	// opened (never Deps). On an error Open has closed what it opened itself.
	Open func(ctx context.Context, deps Deps, cfg C) (b B, close func() error, err error)
}

// OpenBackends opens every backend of list that deps and cfg enable, in list order, and
// returns them by name. Each close goes to closers, so that closers.Close (or Fail) closes
// them last opened first; an error names the backend's flag, and closers then still holds
// what was opened before it (the caller's closers.Fail closes it).
func OpenBackends[B comparable, C any](ctx context.Context, deps Deps, cfg C, list []Backend[B, C], closers *Closers) (map[string]B, error) {
	out := make(map[string]B, len(list))
	var zero B
	for _, e := range list {
		b, closeFn, err := e.Open(ctx, deps, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Flag, err)
		}
		if closeFn != nil {
			closers.Add(closeFn)
		}
		if b != zero {
			out[e.Name] = b
		}
	}
	return out, nil
}

// Preference is the names of list in order: the default-backend preference that
// DefaultBackend takes.
func Preference[B comparable, C any](list []Backend[B, C]) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.Name
	}
	return out
}
