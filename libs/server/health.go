package server

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
)

// Check is a cheap round trip to one backend (a Redis PING, a SQL SELECT 1, a read in
// ZooKeeper): nil when the backend answers.
type Check func(ctx context.Context) error

// checkTimeout bounds one backend check: a backend that takes longer is not ready.
const checkTimeout = 2 * time.Second

// Mount is a service to serve: its Connect handler at Path, the checks of the backends it
// needs (by backend name) for gRPC health and /readyz, and a summary for the startup line.
type Mount struct {
	// Name names the service in the startup line and in /readyz; default Path's service name.
	Name string
	// Path is the handler's route prefix, "/coordkit.x.v1.XService/".
	Path string
	// Handler serves the service's procedures.
	Handler http.Handler
	// Checks are the service's backends by name; none means always SERVING.
	Checks map[string]Check
	// Summary is key-value pairs for the startup line, such as the enabled backends.
	Summary []any
}

// health answers gRPC health checks and /readyz from the services' backend checks, each
// service's result cached for ttl so that frequent probes do not hammer the backends. A
// service is SERVING when every one of its backends answers; the empty service name, the
// whole process, when every service is.
type health struct {
	ttl      time.Duration
	services map[string]*serviceHealth // by gRPC service name
	order    []string
}

type serviceHealth struct {
	name   string // short name, for /readyz
	checks map[string]Check

	mu     sync.Mutex // held while checking, so concurrent probes share one round of checks
	at     time.Time
	failed map[string]string // backend name -> error, for the last round
}

func newHealth(ttl time.Duration, mounts []Mount) *health {
	h := &health{ttl: ttl, services: map[string]*serviceHealth{}}
	for _, m := range mounts {
		svc := serviceName(m.Path)
		h.services[svc] = &serviceHealth{name: m.Name, checks: m.Checks}
		h.order = append(h.order, svc)
	}
	return h
}

// failures runs (or takes from the cache) the service's checks and returns the failed
// backends with their errors.
func (s *serviceHealth) failures(ctx context.Context, ttl time.Duration) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < ttl {
		return s.failed
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed = map[string]string{}
	)
	for name, check := range s.checks {
		wg.Go(func() {
			if err := check(ctx); err != nil {
				mu.Lock()
				failed[name] = err.Error()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s.at, s.failed = time.Now(), failed
	return failed
}

// failures runs the checks of the named services at once (a backend they share that hangs
// costs one checkTimeout, not one per service) and returns each one's failed backends.
func (h *health) failures(ctx context.Context, names []string) []map[string]string {
	out := make([]map[string]string, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { out[i] = h.services[n].failures(ctx, h.ttl) })
	}
	wg.Wait()
	return out
}

// Check implements grpchealth.Checker.
func (h *health) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	var names []string
	if req.Service == "" {
		names = h.order
	} else if _, ok := h.services[req.Service]; ok {
		names = []string{req.Service}
	} else {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("server: unknown service "+req.Service))
	}
	status := grpchealth.StatusServing
	for _, failed := range h.failures(ctx, names) {
		if len(failed) > 0 {
			status = grpchealth.StatusNotServing
		}
	}
	return &grpchealth.CheckResponse{Status: status}, nil
}

// readiness is the /readyz body: ready, and each service's backends with "ok" or their error.
type readiness struct {
	Ready    bool                         `json:"ready"`
	Services map[string]map[string]string `json:"services"`
}

// readyz answers 200 when every service's backends answer and 503 otherwise, with a JSON
// body naming every backend and the error of each failing one.
func (h *health) readyz(w http.ResponseWriter, r *http.Request) {
	body := readiness{Ready: true, Services: map[string]map[string]string{}}
	all := h.failures(r.Context(), h.order)
	for i, n := range h.order {
		s, failed := h.services[n], all[i]
		backends := map[string]string{}
		for _, b := range slices.Sorted(maps.Keys(s.checks)) {
			backends[b] = "ok"
			if msg, bad := failed[b]; bad {
				backends[b], body.Ready = msg, false
			}
		}
		body.Services[s.name] = backends
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !body.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(body) //nolint:errcheck // the client went away
}

// healthz answers 200 while the process serves: liveness, which no backend affects.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte("ok\n")) //nolint:errcheck // the client went away
}
