package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// PutOption configures one Put.
type PutOption func(*taskpickv1.NewTask, *string)

// WithPutBackend puts into the pool of this backend; empty (the default) means the service's
// default backend.
func WithPutBackend(name string) PutOption {
	return func(_ *taskpickv1.NewTask, backend *string) { *backend = name }
}

// WithPriority sets the task's priority (higher is picked first by ORDER_PRIORITY).
func WithPriority(p int32) PutOption {
	return func(t *taskpickv1.NewTask, _ *string) { t.Priority = p }
}

// WithRunAt makes the task wait until at before it can be picked.
func WithRunAt(at time.Time) PutOption {
	return func(t *taskpickv1.NewTask, _ *string) { t.RunAt = timestamppb.New(at) }
}

// WithMaxAttempts sets how many picks the task gets before it is dead (0: the service's
// default).
func WithMaxAttempts(n uint32) PutOption {
	return func(t *taskpickv1.NewTask, _ *string) { t.MaxAttempts = n }
}

// WithUniqueKey makes the task unique by key within its pool: while another task holds the
// key (for its scope, UNIQUE_SCOPE_ACTIVE unless WithUniqueScope or WithUniquePeriod says
// otherwise), Put adds nothing and answers that task, Duplicate. Empty means no uniqueness.
func WithUniqueKey(key string) PutOption {
	return func(t *taskpickv1.NewTask, _ *string) { t.UniqueKey = key }
}

// WithUniqueScope sets how long the unique key is held: UNIQUE_SCOPE_QUEUED (until the task
// is first picked), UNIQUE_SCOPE_ACTIVE (until it is acked or dead) or UNIQUE_SCOPE_PERIOD
// (with WithUniquePeriod).
func WithUniqueScope(scope taskpickv1.UniqueScope) PutOption {
	return func(t *taskpickv1.NewTask, _ *string) { t.UniqueScope = scope }
}

// WithUniquePeriod holds the unique key for d from the Put, whatever becomes of the task
// (UNIQUE_SCOPE_PERIOD).
func WithUniquePeriod(d time.Duration) PutOption {
	return func(t *taskpickv1.NewTask, _ *string) {
		t.UniqueScope = taskpickv1.UniqueScope_UNIQUE_SCOPE_PERIOD
		t.UniquePeriod = durationpb.New(d)
	}
}

// PutResult is what Put did.
type PutResult struct {
	// ID is the task that now stands for the Put: the task put, or, for a duplicate, the
	// task that holds its unique key.
	ID string
	// Created is true when the task was added; false when its id existed already or it is a
	// duplicate.
	Created bool
	// Duplicate is true when the task was not added because the task ID holds its unique
	// key.
	Duplicate bool
	// State is, for a duplicate, the state of the task ID when the Put saw it
	// (STATE_UNSPECIFIED when a UNIQUE_SCOPE_PERIOD key outlived its task).
	State taskpickv1.State
}

// Put adds one task to pool: id must be unique within it (a Put of an existing id adds
// nothing, Created false), payload is opaque to the service. With WithUniqueKey a task that
// duplicates one holding its key is answered, never an error.
func (c *Client) Put(ctx context.Context, pool, id string, payload []byte, opts ...PutOption) (PutResult, error) {
	nt := &taskpickv1.NewTask{Id: id, Payload: payload}
	var backend string
	for _, opt := range opts {
		opt(nt, &backend)
	}
	resp, err := c.tasks.Put(ctx, &taskpickv1.PutRequest{Backend: backend, Pool: pool, Tasks: []*taskpickv1.NewTask{nt}})
	if err != nil {
		return PutResult{}, err
	}
	if len(resp.GetCreated()) != 1 {
		return PutResult{}, fmt.Errorf("client: Put of one task answered %d results", len(resp.GetCreated()))
	}
	r := PutResult{ID: id, Created: resp.GetCreated()[0]}
	if len(resp.GetDuplicate()) == 1 && resp.GetDuplicate()[0] {
		if len(resp.GetExistingId()) != 1 || len(resp.GetExistingState()) != 1 {
			return PutResult{}, fmt.Errorf("client: Put answered a duplicate without the task that holds its key")
		}
		r.Duplicate, r.ID, r.State = true, resp.GetExistingId()[0], resp.GetExistingState()[0]
	}
	return r, nil
}
