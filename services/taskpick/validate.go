package taskpick

import (
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
)

// Limits on requests, checked at the edge before any backend is touched. Pools and ids follow
// the lock keys' rule (server.CheckKey).
const (
	// MaxPayloadBytes is the largest task payload. A request as a whole is also bounded by
	// the server's request limit (1 MiB by default), which bounds a batch Put.
	MaxPayloadBytes = 256 << 10
	// MaxPutTasks is the largest Put batch.
	MaxPutTasks = 1000
	// MaxPickCount is the most tasks one Pick leases.
	MaxPickCount = 100
	// MinTTL and MaxTTL bound a lease; DefaultTTL is used when a request leaves it unset.
	MinTTL = time.Second
	// MaxTTL is the longest lease.
	MaxTTL = 12 * time.Hour
	// DefaultTTL is the lease when none is asked for.
	DefaultTTL = 30 * time.Second
	// MaxWait is the longest server-side wait of one Pick.
	MaxWait = time.Hour
	// MaxDelay is how far ahead run_at and retry_after may be.
	MaxDelay = 30 * 24 * time.Hour
	// DefaultMaxAttempts is a task's attempt budget when its Put leaves it unset.
	DefaultMaxAttempts = 25
	// MaxAttempts is the largest attempt budget.
	MaxAttempts = 1000
	// MaxReasonBytes is how much of a Nack's reason is kept; longer reasons are cut.
	MaxReasonBytes = 1024
	// MaxListDead is the most dead tasks one ListDead returns; DefaultListDead is used for 0.
	MaxListDead = 1000
	// DefaultListDead is ListDead's limit when none is asked for.
	DefaultListDead = 100
	// MaxUniquePeriod is the longest unique_period; unique keys follow the ids' rule
	// (server.CheckKey: at most server.MaxKeyBytes).
	MaxUniquePeriod = 30 * 24 * time.Hour
)

// checkToken refuses token 0: no lease ever has it.
func checkToken(token uint64) error {
	if token == 0 {
		return server.InvalidField("lease_token", "must not be 0: pass the token Pick returned")
	}
	return nil
}

// checkSecret refuses a missing lease secret (a client that predates them, or forgot) with
// invalid_argument naming the field, and one longer than any the service makes. A wrong
// secret of a plausible length is failed_precondition, from the backend, like a stale token.
func checkSecret(secret string) error {
	switch {
	case secret == "":
		return server.InvalidField("lease_secret", "is empty: pass the lease_secret Pick returned with the task")
	case len(secret) > MaxLeaseSecretBytes:
		return server.InvalidField("lease_secret", "is %d bytes, the limit is %d", len(secret), MaxLeaseSecretBytes)
	}
	return nil
}

// parseTasks validates a whole Put batch before anything is written.
func parseTasks(in []*taskpickv1.NewTask, now time.Time) ([]NewTask, error) {
	if len(in) == 0 || len(in) > MaxPutTasks {
		return nil, server.InvalidField("tasks", "has %d tasks, want 1 to %d", len(in), MaxPutTasks)
	}
	seen := make(map[string]int, len(in))
	out := make([]NewTask, len(in))
	for i, t := range in {
		field := func(name string) string { return "tasks[" + strconv.Itoa(i) + "]." + name }
		if err := server.CheckKey(field("id"), t.GetId()); err != nil {
			return nil, err
		}
		if j, dup := seen[t.GetId()]; dup {
			return nil, server.InvalidField(field("id"), "repeats tasks[%d].id: ids in one Put must differ", j)
		}
		seen[t.GetId()] = i
		if len(t.GetPayload()) > MaxPayloadBytes {
			return nil, server.InvalidField(field("payload"), "is %d bytes, the limit is %d", len(t.GetPayload()), MaxPayloadBytes)
		}
		maxA := t.GetMaxAttempts() // 0: the pool's default, which the backend reads
		if maxA > MaxAttempts {
			return nil, server.InvalidField(field("max_attempts"), "%d is over the limit %d", maxA, MaxAttempts)
		}
		delay, err := delayUntil(field("run_at"), t.GetRunAt(), now)
		if err != nil {
			return nil, err
		}
		out[i] = NewTask{ID: t.GetId(), Payload: t.GetPayload(), Priority: t.GetPriority(), Delay: delay, MaxAttempts: maxA}
		if err := parseUnique(field, t, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseUnique validates a task's unique_key, unique_scope and unique_period into nt.
func parseUnique(field func(string) string, t *taskpickv1.NewTask, nt *NewTask) error {
	key, scope, period := t.GetUniqueKey(), t.GetUniqueScope(), t.GetUniquePeriod()
	if key == "" {
		if scope != taskpickv1.UniqueScope_UNIQUE_SCOPE_UNSPECIFIED {
			return server.InvalidField(field("unique_scope"), "is set without a unique_key")
		}
		if period != nil {
			return server.InvalidField(field("unique_period"), "is set without a unique_key")
		}
		return nil
	}
	if err := server.CheckKey(field("unique_key"), key); err != nil {
		return err
	}
	nt.UniqueKey = key
	switch scope {
	case taskpickv1.UniqueScope_UNIQUE_SCOPE_UNSPECIFIED, taskpickv1.UniqueScope_UNIQUE_SCOPE_ACTIVE:
		nt.UniqueScope = UniqueActive
	case taskpickv1.UniqueScope_UNIQUE_SCOPE_QUEUED:
		nt.UniqueScope = UniqueQueued
	case taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD:
		nt.UniqueScope = UniquePeriodScope
		if period == nil {
			return server.InvalidField(field("unique_period"), "is required with UNIQUE_SCOPE_PERIOD")
		}
		d, err := server.DurationIn(field("unique_period"), period, 0, time.Millisecond, MaxUniquePeriod)
		if err != nil {
			return err
		}
		nt.UniquePeriod = d
		return nil
	default:
		return server.InvalidField(field("unique_scope"), "%d is not a known scope (UNIQUE_SCOPE_QUEUED, UNIQUE_SCOPE_ACTIVE or UNIQUE_SCOPE_PERIOD)", int32(scope))
	}
	if period != nil {
		return server.InvalidField(field("unique_period"), "is only for UNIQUE_SCOPE_PERIOD")
	}
	return nil
}

// delayUntil is how long until ts (0 when unset or past), at most MaxDelay.
func delayUntil(field string, ts *timestamppb.Timestamp, now time.Time) (time.Duration, error) {
	if ts == nil {
		return 0, nil
	}
	if err := ts.CheckValid(); err != nil {
		return 0, server.InvalidField(field, "%v", err)
	}
	d := ts.AsTime().Sub(now)
	if d > MaxDelay {
		return 0, server.InvalidField(field, "is %v ahead, the limit is %v", d.Round(time.Second), MaxDelay)
	}
	return max(d, 0), nil
}

// parseOrder maps the API's order; unset is FIFO.
func parseOrder(o taskpickv1.Order) (Order, error) {
	switch o {
	case taskpickv1.Order_ORDER_UNSPECIFIED, taskpickv1.Order_ORDER_FIFO:
		return FIFO, nil
	case taskpickv1.Order_ORDER_PRIORITY:
		return Priority, nil
	case taskpickv1.Order_ORDER_RANDOM:
		return Random, nil
	}
	return 0, server.InvalidField("order", "%d is not a known order (ORDER_RANDOM, ORDER_FIFO or ORDER_PRIORITY)", int32(o))
}

// parseCount maps a count (0 means 1) and checks it against limit.
func parseCount(field string, n uint32, def, limit int) (int, error) {
	if n == 0 {
		return def, nil
	}
	if int64(n) > int64(limit) {
		return 0, server.InvalidField(field, "%d is outside [1, %d]", n, limit)
	}
	return int(n), nil
}

// parseIDs validates Requeue's ids.
func parseIDs(ids []string) error {
	if len(ids) == 0 || len(ids) > MaxPutTasks {
		return server.InvalidField("ids", "has %d ids, want 1 to %d", len(ids), MaxPutTasks)
	}
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		if err := server.CheckKey("ids["+strconv.Itoa(i)+"]", id); err != nil {
			return err
		}
		if seen[id] {
			return server.InvalidField("ids["+strconv.Itoa(i)+"]", "repeats an earlier id")
		}
		seen[id] = true
	}
	return nil
}

// cutReason keeps at most MaxReasonBytes of valid UTF-8 of a Nack's reason.
func cutReason(s string) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // invalid bytes become U+FFFD
	}
	if len(s) <= MaxReasonBytes {
		return s
	}
	s = s[:MaxReasonBytes]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
