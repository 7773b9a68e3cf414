package taskpick

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
)

// Config configures a Service.
type Config struct {
	// Backends maps backend names (redis, mysql, sqlite) to engines. At least one is required.
	Backends map[string]Backend
	// Default names the backend of requests that name none; it may be empty with one backend.
	Default string
	// Events publishes available events and wakes waiting Picks; nil means waiting Picks poll.
	Events *event.Bus
	// SweepInterval is how often this instance recovers expired leases; default
	// DefaultSweepInterval. A lease is recovered within its ttl plus about this much.
	SweepInterval time.Duration
	// Recheck is how often a waiting Pick tries again without an event while events flow,
	// bounding what a lost event costs; default DefaultRecheck.
	Recheck time.Duration
	// Registerer receives the task metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Logger logs failed sweeps; default slog.Default().
	Logger *slog.Logger
	// MaxAnswerBytes bounds every answer, in bytes, in either encoding (see AnswerBytes):
	// Pick leases, ListDead lists and a Batch's Gets read no more than fits. Default
	// DefaultMaxAnswerBytes (4 MiB); at least MinAnswerBytes.
	MaxAnswerBytes int
	// ScheduleInterval is how often this instance fires due schedules; default
	// DefaultScheduleInterval. A tick fires within about this much after it is due.
	ScheduleInterval time.Duration
	// ScheduleGrace is how late a tick may fire and still count as on time; older ticks
	// were missed and follow their schedule's Missed policy. Default DefaultScheduleGrace.
	ScheduleGrace time.Duration
	// Clock is the clock schedules are reckoned by; default time.Now. Instances sharing a
	// backend should have clocks in agreement: one running ahead fires ticks early by as
	// much (never twice).
	Clock func() time.Time
}

// DefaultSweepInterval is how often each instance sweeps expired leases by default.
const DefaultSweepInterval = 250 * time.Millisecond

// Service implements coordkit.taskpick.v1.TaskPickService.
type Service struct {
	backends  map[string]Backend
	def       string
	bus       *event.Bus
	waiters   *waiters
	limits    *limitedPools
	recheck   time.Duration
	metrics   *metrics
	log       *slog.Logger
	unsub     func() error
	maxAnswer int
	stopSweep context.CancelFunc
	swept     sync.WaitGroup
	clock     func() time.Time
	grace     time.Duration
}

var _ taskpickv1connect.TaskPickServiceHandler = (*Service)(nil)

// NewService checks cfg, subscribes to available events and starts the sweepers and the
// schedulers. Close stops
// them; it does not close the backends.
func NewService(cfg Config) (*Service, error) {
	if len(cfg.Backends) == 0 {
		return nil, errors.New("taskpick: no backend configured")
	}
	def, err := service.DefaultBackend(cfg.Backends, cfg.Default)
	if err != nil {
		return nil, fmt.Errorf("taskpick: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = DefaultRecheck
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.ScheduleInterval <= 0 {
		cfg.ScheduleInterval = DefaultScheduleInterval
	}
	if cfg.ScheduleGrace <= 0 {
		cfg.ScheduleGrace = DefaultScheduleGrace
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MaxAnswerBytes == 0 {
		cfg.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if cfg.MaxAnswerBytes < MinAnswerBytes {
		return nil, fmt.Errorf("taskpick: MaxAnswerBytes %d is below %d, the answer of one task of the largest size", cfg.MaxAnswerBytes, MinAnswerBytes)
	}
	s := &Service{backends: cfg.Backends, def: def, bus: cfg.Events, waiters: newWaiters(), limits: newLimitedPools(), recheck: cfg.Recheck,
		metrics: newMetrics(cfg.Registerer), log: cfg.Logger, maxAnswer: cfg.MaxAnswerBytes,
		clock: cfg.Clock, grace: cfg.ScheduleGrace}
	if s.bus != nil {
		unsub, err := s.bus.Subscribe(availablePattern, s.onAvailable)
		if err != nil {
			return nil, fmt.Errorf("taskpick: subscribe: %w", err)
		}
		s.unsub = unsub
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stopSweep = stop
	for name, b := range cfg.Backends {
		s.swept.Add(1)
		go s.sweepLoop(ctx, name, b, cfg.SweepInterval)
		s.swept.Add(1)
		go s.scheduleLoop(ctx, name, b, cfg.ScheduleInterval)
	}
	return s, nil
}

// Close stops the sweepers, the schedulers and the event subscription. It closes no backend: whoever opened
// them closes them, after the service (taskpickservice.Open's Mounted.Close does).
func (s *Service) Close() error {
	s.stopSweep()
	s.swept.Wait()
	if s.unsub != nil {
		return s.unsub()
	}
	return nil
}

// backend resolves a request's backend name.
func (s *Service) backend(name string) (string, Backend, error) {
	return service.ResolveBackend(s.backends, s.def, name)
}

// Put implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Put(ctx context.Context, req *taskpickv1.PutRequest) (*taskpickv1.PutResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	tasks, err := parseTasks(req.GetTasks(), time.Now())
	if err != nil {
		return nil, err
	}
	if err := s.checkPutAnswer(req.GetTasks()); err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	results, err := b.Put(ctx, req.GetPool(), tasks)
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	resp := putResponse(results, tasks)
	n := 0
	for i, r := range results {
		if r.Created && tasks[i].Delay == 0 {
			n++
		}
	}
	dups := countTrue(resp.GetDuplicate())
	s.count(name, "put", countTrue(resp.Created))
	s.count(name, "duplicate", dups)
	s.count(name, "exists", len(results)-countTrue(resp.Created)-dups)
	s.announce(name, req.GetPool(), n)
	return resp, nil
}

// putResponse maps a backend's Put results. The duplicate lists are left empty when no task
// has a unique key, so that the answers of plain Puts stay as they were.
func putResponse(results []PutResult, tasks []NewTask) *taskpickv1.PutResponse {
	resp := &taskpickv1.PutResponse{Created: make([]bool, len(results))}
	for i, r := range results {
		resp.Created[i] = r.Created
	}
	if !slices.ContainsFunc(tasks, func(t NewTask) bool { return t.UniqueKey != "" }) {
		return resp
	}
	resp.Duplicate, resp.ExistingId = make([]bool, len(results)), make([]string, len(results))
	resp.ExistingState = make([]taskpickv1.State, len(results))
	for i, r := range results {
		if r.Duplicate {
			resp.Duplicate[i], resp.ExistingId[i], resp.ExistingState[i] = true, r.HolderID, taskpickv1.State(r.HolderState)
		}
	}
	return resp
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func (s *Service) count(backend, ev string, n int) {
	if n > 0 {
		s.metrics.tasks.WithLabelValues(backend, ev).Add(float64(n))
	}
}

// Pick implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Pick(ctx context.Context, req *taskpickv1.PickRequest) (*taskpickv1.PickResponse, error) {
	taken := time.Now() // expires_after is measured from here, before any wait
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	n, err := parseCount("count", req.GetCount(), 1, MaxPickCount)
	if err != nil {
		return nil, err
	}
	ttl, err := server.DurationIn("ttl", req.GetTtl(), DefaultTTL, MinTTL, MaxTTL)
	if err != nil {
		return nil, err
	}
	order, err := parseOrder(req.GetOrder())
	if err != nil {
		return nil, err
	}
	wait, err := server.DurationIn("wait", req.GetWait(), 0, 0, MaxWait)
	if err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	secrets, digests := newLeases(n)
	spec := PickSpec{N: n, TTL: ttl, Order: order, Digests: digests, MaxBytes: s.maxAnswer - answerSlack}
	tasks, start, err := s.pick(ctx, name, b, req.GetPool(), spec, wait)
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	s.count(name, "picked", len(tasks))
	resp := &taskpickv1.PickResponse{Tasks: make([]*taskpickv1.LeasedTask, len(tasks))}
	expires := timestamppb.New(start.Add(ttl))
	after := leaseSpan(start.Add(ttl), taken)
	for i, t := range tasks {
		resp.Tasks[i] = &taskpickv1.LeasedTask{
			Id: t.ID, Payload: t.Payload, Priority: t.Priority, LeaseToken: t.Token,
			Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, ExpiresAt: expires, LeaseSecret: secrets[i],
			ExpiresAfter: after,
		}
	}
	return resp, nil
}

// Ack implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Ack(ctx context.Context, req *taskpickv1.AckRequest) (*taskpickv1.AckResponse, error) {
	lease, err := parseLease(req.GetPool(), req.GetId(), req.GetLeaseToken(), req.GetLeaseSecret())
	if err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if err := b.Ack(ctx, req.GetPool(), req.GetId(), lease); err != nil {
		return nil, server.Error(ctx, err)
	}
	s.count(name, "acked", 1)
	s.freed(ctx, name, b, req.GetPool(), 1)
	return &taskpickv1.AckResponse{}, nil
}

// Nack implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Nack(ctx context.Context, req *taskpickv1.NackRequest) (*taskpickv1.NackResponse, error) {
	lease, err := parseLease(req.GetPool(), req.GetId(), req.GetLeaseToken(), req.GetLeaseSecret())
	if err != nil {
		return nil, err
	}
	retry, err := server.DurationIn("retry_after", req.GetRetryAfter(), 0, 0, MaxDelay)
	if err != nil {
		return nil, err
	}
	fallback, err := server.DurationIn("default_retry_after", req.GetDefaultRetryAfter(), 0, 0, MaxDelay)
	if err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if req.GetRetryAfter() == nil {
		if retry, err = policyOr(ctx, b, req.GetPool(), fallback); err != nil {
			return nil, server.Error(ctx, err)
		}
	}
	dead, err := b.Nack(ctx, req.GetPool(), req.GetId(), lease, retry, cutReason(req.GetReason()))
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	s.count(name, "nacked", 1)
	if dead {
		s.count(name, "died", 1)
	}
	if !dead && retry <= 0 { // a policy's delay may be 0 too; a needless wake costs one Pick
		s.announce(name, req.GetPool(), 1)
	} else {
		s.freed(ctx, name, b, req.GetPool(), 1)
	}
	return &taskpickv1.NackResponse{Dead: dead}, nil
}

// Extend implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Extend(ctx context.Context, req *taskpickv1.ExtendRequest) (*taskpickv1.ExtendResponse, error) {
	start := time.Now() // the new lease is reckoned from here, before the backend is asked
	lease, err := parseLease(req.GetPool(), req.GetId(), req.GetLeaseToken(), req.GetLeaseSecret())
	if err != nil {
		return nil, err
	}
	ttl, err := server.DurationIn("ttl", req.GetTtl(), DefaultTTL, MinTTL, MaxTTL)
	if err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	if err := b.Extend(ctx, req.GetPool(), req.GetId(), lease, ttl); err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.ExtendResponse{ExpiresAt: timestamppb.New(start.Add(ttl)), ExpiresAfter: leaseSpan(start.Add(ttl), start)}, nil
}

// leaseSpan is a lease's end as expires_after: the span from taken, when the service took the
// call up, to end. The backend was asked after taken and end is a lower bound of the lease's
// real end, so a client that adds the span to its own send time (earlier than taken) stays
// inside the lease whatever the two wall clocks say. Both times carry monotonic readings, so
// a step of the service's wall clock meanwhile does not skew the span.
func leaseSpan(end, taken time.Time) *durationpb.Duration {
	return durationpb.New(max(end.Sub(taken), 0))
}

// parseLease validates the fields Ack, Nack and Extend share and hashes the lease's secret:
// the backends see only its digest.
func parseLease(pool, id string, token uint64, secret string) (Lease, error) {
	if err := server.CheckKey("pool", pool); err != nil {
		return Lease{}, err
	}
	if err := server.CheckKey("id", id); err != nil {
		return Lease{}, err
	}
	if err := checkToken(token); err != nil {
		return Lease{}, err
	}
	if err := checkSecret(secret); err != nil {
		return Lease{}, err
	}
	return Lease{Token: token, Digest: LeaseDigest(secret)}, nil
}

// Get implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Get(ctx context.Context, req *taskpickv1.GetRequest) (*taskpickv1.GetResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if err := server.CheckKey("id", req.GetId()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	t, err := b.Get(ctx, req.GetPool(), req.GetId())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	return &taskpickv1.GetResponse{Task: taskProto(t)}, nil
}

func taskProto(t Task) *taskpickv1.Task {
	return &taskpickv1.Task{
		Id: t.ID, Payload: t.Payload, Priority: t.Priority, State: taskpickv1.State(t.State),
		Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, Failures: t.Failures, Recoveries: t.Recoveries,
		RunAt: timestamppb.New(t.RunAt), LastError: t.LastError,
	}
}

// Stats implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Stats(ctx context.Context, req *taskpickv1.StatsRequest) (*taskpickv1.StatsResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	st, err := b.Stats(ctx, req.GetPool())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	set, _, err := b.Settings(ctx, req.GetPool())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	resp := &taskpickv1.StatsResponse{Available: st.Available, Delayed: st.Delayed, Leased: st.Leased, Dead: st.Dead, Done: st.Done,
		Cancelled: st.Cancelled, Paused: set.Paused}
	if !st.OldestAvailable.IsZero() {
		resp.OldestAvailableAge = durationpb.New(max(st.Now.Sub(st.OldestAvailable), 0))
	}
	return resp, nil
}

// ListDead implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) ListDead(ctx context.Context, req *taskpickv1.ListDeadRequest) (*taskpickv1.ListDeadResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	limit, err := parseCount("limit", req.GetLimit(), DefaultListDead, MaxListDead)
	if err != nil {
		return nil, err
	}
	_, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	tasks, total, truncated, err := b.ListDead(ctx, req.GetPool(), limit, s.maxAnswer-answerSlack)
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	resp := &taskpickv1.ListDeadResponse{Total: total, Truncated: truncated}
	for _, t := range tasks {
		resp.Tasks = append(resp.Tasks, taskProto(t))
	}
	return resp, nil
}

// Requeue implements taskpickv1connect.TaskPickServiceHandler.
func (s *Service) Requeue(ctx context.Context, req *taskpickv1.RequeueRequest) (*taskpickv1.RequeueResponse, error) {
	if err := server.CheckKey("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if err := parseIDs(req.GetIds()); err != nil {
		return nil, err
	}
	name, b, err := s.backend(req.GetBackend())
	if err != nil {
		return nil, err
	}
	done, err := b.Requeue(ctx, req.GetPool(), req.GetIds())
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	s.count(name, "requeued", countTrue(done))
	s.announce(name, req.GetPool(), countTrue(done))
	return &taskpickv1.RequeueResponse{Requeued: done}, nil
}

// policyOr is the retryAfter of a Nack without its own delay: PoolPolicy when the pool has a
// retry policy, else fallback (the caller's default_retry_after). Only a fallback costs the
// read of the pool's settings.
func policyOr(ctx context.Context, b Backend, pool string, fallback time.Duration) (time.Duration, error) {
	if fallback <= 0 {
		return PoolPolicy, nil
	}
	set, _, err := b.Settings(ctx, pool)
	if err != nil {
		return 0, err
	}
	if set.Retry != nil {
		return PoolPolicy, nil
	}
	return fallback, nil
}
