package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
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
	// LaggedWatchGrace is how long a Watch stream that fell behind, and is stuck sending to
	// a client that stopped reading, has to take what was sent before it is cut (see
	// server.CutStream), so a client that never reads again frees its goroutine and stream
	// slot; default DefaultLaggedWatchGrace.
	LaggedWatchGrace time.Duration
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
	hub      *watchHub
	lagGrace time.Duration // Config.LaggedWatchGrace
	expiries *expiryTracker
	push     *pushState
	unsubs   []func() error
	slots    map[string]slots // per backend, see Config.WaitAttempts
	metrics  *metrics
	log      *slog.Logger
	// background runs the calls a request leaves behind (a fair waiter leaving its line);
	// Close waits for them, so that the backends may close after it.
	background tracked
}

var _ lockv1connect.LockServiceHandler = (*Service)(nil)

// NewService checks cfg and returns the service.
func NewService(cfg Config) (*Service, error) {
	if len(cfg.Backends) == 0 {
		return nil, errors.New("lock: no backend configured")
	}
	def, err := service.DefaultBackend(cfg.Backends, cfg.Default)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if def == "" {
		return nil, fmt.Errorf("lock: no default backend among several (configured: %s)", service.BackendNames(cfg.Backends))
	}
	s := &Service{
		backends: cfg.Backends, def: def, bus: cfg.Events, recheck: cfg.Recheck,
		waiters: newWaiters(), watches: newWatches(), expiries: newExpiryTracker(), push: newPushState(), metrics: newMetrics(cfg.Registerer), log: cfg.Logger,
	}
	s.hub = newWatchHub(s)
	if s.lagGrace = cfg.LaggedWatchGrace; s.lagGrace <= 0 {
		s.lagGrace = DefaultLaggedWatchGrace
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

// Close stops the service's event subscriptions and waits for its background calls. It
// closes no backend, nor the event bus: whoever opened them closes them, after the service
// (lockservice.Open's Mounted.Close does).
func (s *Service) Close() error {
	s.stopEvents()
	s.expiries.stop()
	s.background.close() // each call bounded by cleanupTimeout
	return nil
}

// backend resolves a request's backend name.
func (s *Service) backend(name string) (string, Backend, error) {
	return service.ResolveBackend(s.backends, s.def, name)
}

// acquireParams is a validated Acquire request. Acquire replaces owner with its digest
// before any backend is asked.
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
	c, err := s.prepareAcquire(req)
	if err != nil {
		return nil, err
	}
	att, err := s.acquire(ctx, c.name, c.b, c.p)
	return s.finishAcquire(ctx, c, att, err)
}

// acquireCall is an Acquire checked and ready for its backend: p.owner is the digest.
type acquireCall struct {
	p      acquireParams
	name   string
	b      Backend
	secret string // the caller's owner, or the one generated for it
	fresh  bool   // the owner was generated for this call
	// start is when the service took the call up, before any wait: the lease's
	// expires_after is measured from it.
	start time.Time
}

// prepareAcquire checks req, resolves its backend and sets its owner: everything an Acquire
// does before it asks the backend.
func (s *Service) prepareAcquire(req *lockv1.AcquireRequest) (acquireCall, error) {
	p, err := parseAcquire(req)
	if err != nil {
		return acquireCall{}, err
	}
	name, b, err := s.backend(p.backend)
	if err != nil {
		return acquireCall{}, err
	}
	if err := s.checkFair(name, b, p); err != nil {
		return acquireCall{}, err
	}
	c := acquireCall{name: name, b: b, fresh: p.owner == "", start: time.Now()}
	if c.fresh {
		p.owner = NewOwner()
	}
	c.secret = p.owner
	p.owner = ownerDigest(c.secret) // from here on, backends see only the digest
	c.p = p
	return c, nil
}

// finishAcquire turns the backend's answer to c into Acquire's: metrics, events, the lease
// with the caller's owner.
func (s *Service) finishAcquire(ctx context.Context, c acquireCall, att Attempt, err error) (*lockv1.AcquireResponse, error) {
	name := c.name
	if err != nil {
		err = server.Error(ctx, err)
		s.metrics.acquires.WithLabelValues(name, server.Failure(err)).Inc()
		return nil, err
	}
	newLease := att.Acquired && (c.fresh || att.Lease.HoldCount == 1)
	if c.fresh && att.Acquired && att.Lease.HoldCount > 1 {
		att = s.dropLostHolds(ctx, name, c.b, c.p.key, c.p.owner, att)
	}
	if newLease {
		s.leaseTaken(name, att.Lease)
	} else if att.Acquired && s.interested(name, att.Lease.Key) { // a re-entry may shorten the lease
		s.trackExpiry(name, att.Lease.Key, State{Held: true, FencingToken: att.Lease.FencingToken, ExpiresAt: att.Lease.ExpiresAt})
	}
	if !att.Acquired {
		s.metrics.acquires.WithLabelValues(name, "busy").Inc()
		return &lockv1.AcquireResponse{Holder: stateToProto(c.p.key, name, att.Holder)}, nil
	}
	result := "acquired"
	if att.Lease.HoldCount > 1 {
		result = "reentered"
	}
	s.metrics.acquires.WithLabelValues(name, result).Inc()
	att.Lease.Owner = c.secret
	return &lockv1.AcquireResponse{Acquired: true, Lease: leaseToProto(name, att.Lease, c.start)}, nil
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
	c, err := s.prepareRelease(req)
	if err != nil {
		return nil, err
	}
	remaining, lease, err := c.b.Release(ctx, c.key, c.owner, c.token)
	return s.finishRelease(ctx, c, remaining, lease, err)
}

// ownedCall is a Release or Renew checked and ready for its backend: owner is the digest.
type ownedCall struct {
	key, owner, name string
	b                Backend
	token            uint64        // Release's fencing token
	ttl              time.Duration // Renew's ttl, 0: the lease's own
	secret           string        // the caller's owner
	start            time.Time     // Renew's: when the service took it up (see acquireCall.start)
}

// prepareRelease checks req and resolves its backend.
func (s *Service) prepareRelease(req *lockv1.ReleaseRequest) (ownedCall, error) {
	if err := validateKey(req.GetKey()); err != nil {
		return ownedCall{}, err
	}
	if err := validateOwner(req.GetOwner(), true); err != nil {
		return ownedCall{}, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return ownedCall{}, err
	}
	return ownedCall{key: req.GetKey(), owner: ownerDigest(req.GetOwner()), name: name, b: b, token: req.GetFencingToken()}, nil
}

// finishRelease turns the backend's answer to c into Release's: metrics, and the release
// event when the lock is free.
func (s *Service) finishRelease(ctx context.Context, c ownedCall, remaining uint32, lease Released, err error) (*lockv1.ReleaseResponse, error) {
	if err != nil {
		err = server.Error(ctx, err)
		s.metrics.releases.WithLabelValues(c.name, server.Failure(err)).Inc()
		return nil, err
	}
	result := "released"
	if remaining == 0 {
		result = "freed"
		s.leaseEnded(lockv1.LockEventKind_LOCK_EVENT_KIND_RELEASED, c.name, c.key, lease.FencingToken, lease.HolderID)
	}
	s.metrics.releases.WithLabelValues(c.name, result).Inc()
	return &lockv1.ReleaseResponse{Released: true, HoldCount: remaining}, nil
}

// Renew implements LockServiceHandler.
func (s *Service) Renew(ctx context.Context, req *lockv1.RenewRequest) (*lockv1.RenewResponse, error) {
	c, err := s.prepareRenew(req)
	if err != nil {
		return nil, err
	}
	lease, err := c.b.Renew(ctx, c.key, c.owner, c.ttl)
	return s.finishRenew(ctx, c, lease, err)
}

// prepareRenew checks req and resolves its backend.
func (s *Service) prepareRenew(req *lockv1.RenewRequest) (ownedCall, error) {
	if err := validateKey(req.GetKey()); err != nil {
		return ownedCall{}, err
	}
	if err := validateOwner(req.GetOwner(), true); err != nil {
		return ownedCall{}, err
	}
	// Without a ttl the backend keeps the lease's own (ttl 0), never a default: a lease
	// taken for 5 minutes must not shrink to DefaultTTL because a watchdog left ttl out.
	var ttl time.Duration
	if req.GetTtl() != nil {
		var err error
		if ttl, err = validateTTL(req.GetTtl()); err != nil {
			return ownedCall{}, err
		}
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return ownedCall{}, err
	}
	return ownedCall{key: req.GetKey(), owner: ownerDigest(req.GetOwner()), name: name, b: b, ttl: ttl, secret: req.GetOwner(), start: time.Now()}, nil
}

// finishRenew turns the backend's answer to c into Renew's.
func (s *Service) finishRenew(ctx context.Context, c ownedCall, lease Lease, err error) (*lockv1.RenewResponse, error) {
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	lease.Owner = c.secret
	if s.interested(c.name, lease.Key) { // a renewal may shorten the lease: time its new end
		s.trackExpiry(c.name, lease.Key, State{Held: true, FencingToken: lease.FencingToken, ExpiresAt: lease.ExpiresAt})
	}
	return &lockv1.RenewResponse{Lease: leaseToProto(c.name, lease, c.start)}, nil
}

// Inspect implements LockServiceHandler.
func (s *Service) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	c, err := s.prepareInspect(req)
	if err != nil {
		return nil, err
	}
	st, err := c.b.Inspect(ctx, c.key)
	return finishInspect(ctx, c, st, err)
}

// prepareInspect checks req and resolves its backend.
func (s *Service) prepareInspect(req *lockv1.InspectRequest) (ownedCall, error) {
	if err := validateKey(req.GetKey()); err != nil {
		return ownedCall{}, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return ownedCall{}, err
	}
	return ownedCall{key: req.GetKey(), name: name, b: b}, nil
}

// finishInspect turns the backend's answer to c into Inspect's.
func finishInspect(ctx context.Context, c ownedCall, st State, err error) (*lockv1.InspectResponse, error) {
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &lockv1.InspectResponse{State: stateToProto(c.key, c.name, st)}, nil
}
