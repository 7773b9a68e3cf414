package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1/lockv1connect"
)

// Config configures a Service.
type Config struct {
	// Backends maps backend names (redis, sqlite, ...) to engines. At least one is required.
	Backends map[string]Backend
	// Default names the backend used when a request leaves backend empty; it may be empty
	// when only one backend is configured.
	Default string
	// Events publishes lock events and pushes waiters awake when a lock they wait for is
	// released or expires; nil means no events, and waiters poll with backoff.
	Events *event.Bus
	// Recheck is how often the first waiter in an instance's line for a key checks the
	// lock without an event, so a lost event delays it by this much at most; default
	// DefaultRecheck, negative never (a lost event then delays it until the holder's
	// lease ends).
	Recheck time.Duration
	// FairEntryTTL is the lease of a fair waiter's entry in a backend's line: its attempts
	// renew it every third of it, and a waiter whose instance died is skipped once it
	// passes; default DefaultFairEntryTTL.
	FairEntryTTL time.Duration
	// WaitAttempts caps, per backend, the backend attempts that blocked Acquires make at
	// once after their first; default DefaultWaitAttempts. Waiters queue for these slots
	// while Release, Renew, Inspect and every first attempt go straight to the backend, so
	// a crowd of waiters cannot starve the holders they wait for.
	WaitAttempts int
	// Registerer receives the lock metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Logger logs lock events worth an operator's attention; default slog.Default().
	Logger *slog.Logger
}

// Service implements coordkit.lock.v1.LockService over the configured backends.
type Service struct {
	backends map[string]Backend
	def      string
	bus      *event.Bus
	recheck  time.Duration
	entryTTL time.Duration
	waiters  *waiters
	watches  *watches
	expiries *expiryTracker
	push     *pushState
	unsubs   []func() error
	slots    map[string]slots // per backend, see Config.WaitAttempts
	metrics  *metrics
	log      *slog.Logger
}

var _ lockv1connect.LockServiceHandler = (*Service)(nil)

// NewService checks cfg and returns the service.
func NewService(cfg Config) (*Service, error) {
	if len(cfg.Backends) == 0 {
		return nil, errors.New("lock: no backend configured")
	}
	def := cfg.Default
	if def == "" && len(cfg.Backends) == 1 {
		for name := range cfg.Backends {
			def = name
		}
	}
	if _, ok := cfg.Backends[def]; !ok {
		return nil, fmt.Errorf("lock: default backend %q is not configured (configured: %s)", def, names(cfg.Backends))
	}
	s := &Service{
		backends: cfg.Backends, def: def, bus: cfg.Events, recheck: cfg.Recheck,
		waiters: newWaiters(), watches: newWatches(), expiries: newExpiryTracker(), push: newPushState(), metrics: newMetrics(cfg.Registerer), log: cfg.Logger,
	}
	if s.recheck == 0 {
		s.recheck = DefaultRecheck
	}
	if s.entryTTL = cfg.FairEntryTTL; s.entryTTL <= 0 {
		s.entryTTL = DefaultFairEntryTTL
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	n := cfg.WaitAttempts
	if n <= 0 {
		n = DefaultWaitAttempts
	}
	s.slots = make(map[string]slots, len(cfg.Backends))
	for name := range cfg.Backends {
		s.slots[name] = make(slots, n)
	}
	if err := s.startEvents(); err != nil {
		return nil, err
	}
	for name, b := range s.backends {
		if r, ok := b.(ExpiryReporter); ok {
			r.ReportExpiries(func(e Expiry) {
				s.leaseEnded(lockv1.LockEventKind_LOCK_EVENT_KIND_EXPIRED, name, e.Key, e.FencingToken, e.HolderID)
			})
		}
	}
	return s, nil
}

// Close stops the service's event subscriptions and closes every backend (not the event
// bus, which the process shares).
func (s *Service) Close() error {
	s.stopEvents()
	s.expiries.stop()
	var errs []error
	for _, b := range s.backends {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}

func names(m map[string]Backend) string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// backend resolves a request's backend name.
func (s *Service) backend(name string) (string, Backend, error) {
	if name == "" {
		name = s.def
	}
	b, ok := s.backends[name]
	if !ok {
		return "", nil, server.InvalidField("backend", "%q is not configured on this service (configured: %s)", name, names(s.backends))
	}
	return name, b, nil
}

// acquireParams is a validated Acquire request.
type acquireParams struct {
	key, owner, backend string
	ttl, wait           time.Duration
	fair                bool
}

// parseAcquire validates an Acquire request without touching any backend; an empty owner
// stays empty here and is generated by Acquire.
func parseAcquire(req *lockv1.AcquireRequest) (acquireParams, error) {
	p := acquireParams{key: req.GetKey(), owner: req.GetOwner(), backend: req.GetBackend(), fair: req.GetFair()}
	if err := validateKey(p.key); err != nil {
		return p, err
	}
	if err := validateOwner(p.owner, false); err != nil {
		return p, err
	}
	var err error
	if p.ttl, err = validateTTL(req.GetTtl()); err != nil {
		return p, err
	}
	if p.wait, err = validateWait(req.GetWait()); err != nil {
		return p, err
	}
	return p, nil
}

// Acquire implements LockServiceHandler.
func (s *Service) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	p, err := parseAcquire(req)
	if err != nil {
		return nil, err
	}
	name, b, err := s.backend(p.backend)
	if err != nil {
		return nil, err
	}
	if err := s.checkFair(name, b, p); err != nil {
		return nil, err
	}
	fresh := p.owner == ""
	if fresh {
		p.owner = NewOwner()
	}

	att, err := s.acquire(ctx, name, b, p)
	if err != nil {
		err = toConnect(ctx, err)
		s.metrics.acquires.WithLabelValues(name, server.Failure(err)).Inc()
		return nil, err
	}
	newLease := att.Acquired && (fresh || att.Lease.HoldCount == 1)
	if fresh && att.Acquired && att.Lease.HoldCount > 1 {
		att = s.dropLostHolds(ctx, name, b, p.key, p.owner, att)
	}
	if newLease {
		s.leaseTaken(name, att.Lease)
	} else if att.Acquired && s.interested(name, att.Lease.Key) { // a re-entry may shorten the lease
		s.trackExpiry(name, att.Lease.Key, State{Held: true, FencingToken: att.Lease.FencingToken, ExpiresAt: att.Lease.ExpiresAt})
	}
	if !att.Acquired {
		s.metrics.acquires.WithLabelValues(name, "busy").Inc()
		return &lockv1.AcquireResponse{Holder: stateToProto(req.GetKey(), name, att.Holder)}, nil
	}
	result := "acquired"
	if att.Lease.HoldCount > 1 {
		result = "reentered"
	}
	s.metrics.acquires.WithLabelValues(name, result).Inc()
	return &lockv1.AcquireResponse{Acquired: true, Lease: leaseToProto(name, att.Lease)}, nil
}

// checkFair refuses fair mode on a backend that keeps no line of waiters.
func (s *Service) checkFair(name string, b Backend, p acquireParams) error {
	if !p.fair || servesFair(b) {
		return nil
	}
	var fair []string
	for n, other := range s.backends {
		if servesFair(other) {
			fair = append(fair, n)
		}
	}
	slices.Sort(fair)
	return server.InvalidField("fair", "backend %q keeps no line of waiters, so it cannot serve first come, first served (fair backends here: %s)",
		name, strings.Join(fair, ", "))
}

// servesFair says whether b keeps a line of waiters (QueueBackend) or queues natively
// (FairBackend).
func servesFair(b Backend) bool {
	_, queues := b.(QueueBackend)
	_, native := b.(FairBackend)
	return queues || native
}

// Release implements LockServiceHandler.
func (s *Service) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := validateKey(req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateOwner(req.GetOwner(), true); err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	remaining, token, err := b.Release(ctx, req.GetKey(), req.GetOwner(), req.GetFencingToken())
	if err != nil {
		err = toConnect(ctx, err)
		s.metrics.releases.WithLabelValues(name, server.Failure(err)).Inc()
		return nil, err
	}
	result := "released"
	if remaining == 0 {
		result = "freed"
		s.leaseEnded(lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, name, req.GetKey(), token, HolderID(req.GetOwner()))
	}
	s.metrics.releases.WithLabelValues(name, result).Inc()
	return &lockv1.ReleaseResponse{Released: true, HoldCount: remaining}, nil
}

// Renew implements LockServiceHandler.
func (s *Service) Renew(ctx context.Context, req *lockv1.RenewRequest) (*lockv1.RenewResponse, error) {
	if err := validateKey(req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateOwner(req.GetOwner(), true); err != nil {
		return nil, err
	}
	// Without a ttl the backend keeps the lease's own (ttl 0), never a default: a lease
	// taken for 5 minutes must not shrink to DefaultTTL because a watchdog left ttl out.
	var ttl time.Duration
	if req.GetTtl() != nil {
		var err error
		if ttl, err = validateTTL(req.GetTtl()); err != nil {
			return nil, err
		}
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	lease, err := b.Renew(ctx, req.GetKey(), req.GetOwner(), ttl)
	if err != nil {
		return nil, toConnect(ctx, err)
	}
	if s.interested(name, lease.Key) { // a renewal may shorten the lease: time its new end
		s.trackExpiry(name, lease.Key, State{Held: true, FencingToken: lease.FencingToken, ExpiresAt: lease.ExpiresAt})
	}
	return &lockv1.RenewResponse{Lease: leaseToProto(name, lease)}, nil
}

// Inspect implements LockServiceHandler.
func (s *Service) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	if err := validateKey(req.GetKey()); err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	st, err := b.Inspect(ctx, req.GetKey())
	if err != nil {
		return nil, toConnect(ctx, err)
	}
	return &lockv1.InspectResponse{State: stateToProto(req.GetKey(), name, st)}, nil
}

// toConnect maps the lock's own errors to Connect codes; everything the services share
// (unavailable backends, shutdown, context endings) goes through server.Error, the one mapping.
func toConnect(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrNotHeld):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, ErrNotOwner):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, ErrHoldLimit):
		return connect.NewError(connect.CodeResourceExhausted, err)
	}
	return server.Error(ctx, err)
}
