package taskpick

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// TestFieldErrorsBeforeBackend: a request with a bad field is answered invalid_argument naming
// that field even when the backend it names does not exist, in every RPC and in a Batch: a
// handler checks the request's own fields, then resolves the backend, then calls it. The
// service has no backend at all, so every backend name is unknown and any backend call would
// crash.
func TestFieldErrorsBeforeBackend(t *testing.T) {
	t.Parallel()
	const nope = "no-such-backend"
	s := &Service{}
	ctx := context.Background()
	task := []*taskpickv1.NewTask{{Id: "a"}}
	long := durationpb.New(1 << 62)
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"Put, empty pool", func() error {
			_, err := s.Put(ctx, &taskpickv1.PutRequest{Backend: nope, Tasks: task})
			return err
		}, "pool"},
		{"Put, no tasks", func() error {
			_, err := s.Put(ctx, &taskpickv1.PutRequest{Backend: nope, Pool: "p"})
			return err
		}, "tasks"},
		{"Pick, empty pool", func() error {
			_, err := s.Pick(ctx, &taskpickv1.PickRequest{Backend: nope})
			return err
		}, "pool"},
		{"Pick, ttl out of range", func() error {
			_, err := s.Pick(ctx, &taskpickv1.PickRequest{Backend: nope, Pool: "p", Ttl: long})
			return err
		}, "ttl"},
		{"Pick, wait out of range", func() error {
			_, err := s.Pick(ctx, &taskpickv1.PickRequest{Backend: nope, Pool: "p", Wait: long})
			return err
		}, "wait"},
		{"Ack, no lease token", func() error {
			_, err := s.Ack(ctx, &taskpickv1.AckRequest{Backend: nope, Pool: "p", Id: "a", LeaseSecret: "s"})
			return err
		}, "lease_token"},
		{"Nack, no lease secret", func() error {
			_, err := s.Nack(ctx, &taskpickv1.NackRequest{Backend: nope, Pool: "p", Id: "a", LeaseToken: 1})
			return err
		}, "lease_secret"},
		{"Nack, retry_after out of range", func() error {
			_, err := s.Nack(ctx, &taskpickv1.NackRequest{Backend: nope, Pool: "p", Id: "a", LeaseToken: 1, LeaseSecret: "s", RetryAfter: long})
			return err
		}, "retry_after"},
		{"Extend, empty id", func() error {
			_, err := s.Extend(ctx, &taskpickv1.ExtendRequest{Backend: nope, Pool: "p", LeaseToken: 1, LeaseSecret: "s"})
			return err
		}, "id"},
		{"Extend, ttl out of range", func() error {
			_, err := s.Extend(ctx, &taskpickv1.ExtendRequest{Backend: nope, Pool: "p", Id: "a", LeaseToken: 1, LeaseSecret: "s", Ttl: long})
			return err
		}, "ttl"},
		{"Get, empty id", func() error {
			_, err := s.Get(ctx, &taskpickv1.GetRequest{Backend: nope, Pool: "p"})
			return err
		}, "id"},
		{"Stats, empty pool", func() error {
			_, err := s.Stats(ctx, &taskpickv1.StatsRequest{Backend: nope})
			return err
		}, "pool"},
		{"ListDead, limit out of range", func() error {
			_, err := s.ListDead(ctx, &taskpickv1.ListDeadRequest{Backend: nope, Pool: "p", Limit: MaxListDead + 1})
			return err
		}, "limit"},
		{"Requeue, no ids", func() error {
			_, err := s.Requeue(ctx, &taskpickv1.RequeueRequest{Backend: nope, Pool: "p"})
			return err
		}, "ids"},
		{"PutSchedule, bad spec", func() error {
			_, err := s.PutSchedule(ctx, &taskpickv1.PutScheduleRequest{Backend: nope, Pool: "p", Name: "n", Spec: "61 * * * *"})
			return err
		}, "spec"},
		{"PutSchedule, unknown timezone", func() error {
			_, err := s.PutSchedule(ctx, &taskpickv1.PutScheduleRequest{Backend: nope, Pool: "p", Name: "n", Spec: "@daily", Timezone: "Nowhere/Land"})
			return err
		}, "timezone"},
		{"GetSchedule, empty name", func() error {
			_, err := s.GetSchedule(ctx, &taskpickv1.GetScheduleRequest{Backend: nope, Pool: "p"})
			return err
		}, "name"},
		{"ListSchedules, limit out of range", func() error {
			_, err := s.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Backend: nope, Pool: "p", Limit: MaxListSchedules + 1})
			return err
		}, "limit"},
		{"PauseSchedule, empty pool", func() error {
			_, err := s.PauseSchedule(ctx, &taskpickv1.PauseScheduleRequest{Backend: nope, Name: "n"})
			return err
		}, "pool"},
		{"ResumeSchedule, empty name", func() error {
			_, err := s.ResumeSchedule(ctx, &taskpickv1.ResumeScheduleRequest{Backend: nope, Pool: "p"})
			return err
		}, "name"},
		{"DeleteSchedule, empty name", func() error {
			_, err := s.DeleteSchedule(ctx, &taskpickv1.DeleteScheduleRequest{Backend: nope, Pool: "p"})
			return err
		}, "name"},
		{"Batch Put, empty pool", func() error {
			r, err := s.Batch(ctx, &taskpickv1.BatchRequest{Operations: []*taskpickv1.BatchOperation{
				{Operation: &taskpickv1.BatchOperation_Put{Put: &taskpickv1.PutRequest{Backend: nope, Tasks: task}}},
			}})
			if err != nil {
				return err
			}
			e := r.GetResults()[0].GetError()
			if e == nil {
				return nil
			}
			var code connect.Code
			if err := code.UnmarshalText([]byte(e.GetCode())); err != nil {
				return err
			}
			return connect.NewError(code, errors.New(e.GetMessage()))
		}, "pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.HasPrefix(ce.Message(), tt.field+":") {
				t.Fatalf("got %v; want invalid_argument naming %s, checked before the unknown backend %q", err, tt.field, nope)
			}
		})
	}
	// The same requests with good fields do reach the backend's name and are refused there.
	if _, err := s.Stats(ctx, &taskpickv1.StatsRequest{Backend: nope, Pool: "p"}); err == nil || !strings.Contains(err.Error(), "backend: ") {
		t.Fatalf("Stats with good fields and an unknown backend = %v, want the backend refused", err)
	}
}
