package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
)

// lateTasks is a task-pick service whose Extend answers only after answerAfter, whatever the
// caller's deadline, with a lease of an hour: an answer that comes too late.
type lateTasks struct {
	taskpickv1connect.TaskPickServiceClient
	answerAfter time.Duration
}

func (s lateTasks) Extend(context.Context, *taskpickv1.ExtendRequest) (*taskpickv1.ExtendResponse, error) {
	time.Sleep(s.answerAfter)
	return &taskpickv1.ExtendResponse{ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)), ExpiresAfter: durationpb.New(time.Hour)}, nil
}

// heldTask is a task as Work runs it, picked by a Pick sent at sent that granted span, whose
// service's expires_at says an hour; its keeper is stopped and its expiry timer too, so that
// only the checks of each call can notice the deadline.
func heldTask(t *testing.T, tasks taskpickv1connect.TaskPickServiceClient, ttl, span time.Duration, sent time.Time) (*Task, *leaseKeeper) {
	t.Helper()
	lt := &taskpickv1.LeasedTask{Id: "a", LeaseToken: 1, Attempt: 1, MaxAttempts: 3,
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)), ExpiresAfter: durationpb.New(span)}
	task := newTask("", "p", lt, ttl, 0, sent, time.Now())
	k := keepLease(context.Background(), &Client{tasks: tasks}, task, ttl)
	k.cancel()
	<-k.done
	task.lc.mu.Lock()
	task.lc.expiry.Stop()
	task.lc.mu.Unlock()
	t.Cleanup(func() { k.stop() }) //nolint:errcheck // lost on purpose
	return task, k
}

// TestTaskFirstCheckSeesDeadline: with every timer stopped, as in a process that was just
// resumed from a pause, a task's lease whose deadline passed is lost on the very first call
// of each check the handler has: its context's Err, Done and Cause, and Task.Err.
func TestTaskFirstCheckSeesDeadline(t *testing.T) {
	t.Parallel()
	checks := map[string]func(task *Task) bool{
		"Task.Err":      func(task *Task) bool { return task.Err() != nil },
		"ctx.Err":       func(task *Task) bool { return task.lc.Context().Err() != nil },
		"ctx.Done":      func(task *Task) bool { return isClosed(task.lc.Context().Done()) },
		"context.Cause": func(task *Task) bool { return context.Cause(task.lc.Context()) != nil },
	}
	const ttl, span = time.Second, 300 * time.Millisecond
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			task, _ := heldTask(t, lateTasks{answerAfter: time.Hour}, ttl, span, time.Now())
			if check(task) {
				t.Fatalf("%s says lost %v before the deadline", name, time.Until(task.Deadline()))
			}
			time.Sleep(time.Until(task.Deadline()) + 10*time.Millisecond)
			if !check(task) {
				t.Fatalf("%s says held %v after the deadline, with no timer to notice", name, time.Since(task.Deadline()))
			}
			if !errors.Is(task.lc.err, ErrLeaseLost) || !errors.Is(context.Cause(task.lc.ctx), ErrLeaseLost) {
				t.Fatalf("after %s said lost: err %v, cause %v; want both ErrLeaseLost", name, task.lc.err, context.Cause(task.lc.ctx))
			}
		})
	}
}

// TestTaskDeadlineFromSendTime: a task's deadline is the Pick's send time plus the granted
// span minus the margin, not the service's expires_at (an hour here); only a service too old
// to send the span falls back to expires_at, capped by the wait and ttl asked for.
func TestTaskDeadlineFromSendTime(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	sent := time.Now().Add(-50 * time.Millisecond)
	task, _ := heldTask(t, lateTasks{answerAfter: time.Hour}, ttl, ttl, sent)
	if got, want := task.Deadline().Sub(sent), ttl-safetyMargin(ttl); got != want {
		t.Errorf("Deadline is %v after the Pick was sent, want ttl - margin = %v", got, want)
	}
	old := &taskpickv1.LeasedTask{Id: "b", ExpiresAt: timestamppb.New(time.Now().Add(time.Hour))}
	if got := newTask("", "p", old, ttl, 3*time.Second, sent, time.Now()).end.Sub(sent); got != 3*time.Second+ttl {
		t.Errorf("no span, expires_at an hour away: end %v after the send, want capped at wait + ttl", got)
	}
}

// TestTaskLateExtendDoesNotRevive: an Extend confirmed after the deadline passed unnoticed
// (no timer, no check in between) is a loss, as every check in between would have said, even
// though its answer grants an hour.
func TestTaskLateExtendDoesNotRevive(t *testing.T) {
	t.Parallel()
	task, k := heldTask(t, lateTasks{answerAfter: 400 * time.Millisecond}, time.Second, 300*time.Millisecond, time.Now())
	k.halt, k.cancel = context.WithCancel(context.Background()) // the keeper's round, run here
	defer k.cancel()
	if k.extend() {
		t.Fatalf("an Extend answered %v after the deadline revived the lease", time.Since(task.Deadline()))
	}
	if !errors.Is(task.Err(), ErrLeaseLost) {
		t.Fatalf("Task.Err = %v, want ErrLeaseLost", task.Err())
	}
}
