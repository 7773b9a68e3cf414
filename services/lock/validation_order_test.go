package lock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
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
	owner := strings.Repeat("o", MinOwnerBytes)
	long := durationpb.New(1 << 62)
	batch := func(op *lockv1.BatchOperation) error {
		r, err := s.Batch(ctx, &lockv1.BatchRequest{Operations: []*lockv1.BatchOperation{op}})
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
	}
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"Acquire, empty key", func() error {
			_, err := s.Acquire(ctx, &lockv1.AcquireRequest{Backend: nope})
			return err
		}, "key"},
		{"Acquire, short owner", func() error {
			_, err := s.Acquire(ctx, &lockv1.AcquireRequest{Backend: nope, Key: "k", Owner: "o"})
			return err
		}, "owner"},
		{"Acquire, ttl out of range", func() error {
			_, err := s.Acquire(ctx, &lockv1.AcquireRequest{Backend: nope, Key: "k", Ttl: long})
			return err
		}, "ttl"},
		{"Acquire, wait out of range", func() error {
			_, err := s.Acquire(ctx, &lockv1.AcquireRequest{Backend: nope, Key: "k", Wait: long})
			return err
		}, "wait"},
		{"Release, no owner", func() error {
			_, err := s.Release(ctx, &lockv1.ReleaseRequest{Backend: nope, Key: "k"})
			return err
		}, "owner"},
		{"Renew, ttl out of range", func() error {
			_, err := s.Renew(ctx, &lockv1.RenewRequest{Backend: nope, Key: "k", Owner: owner, Ttl: long})
			return err
		}, "ttl"},
		{"Inspect, empty key", func() error {
			_, err := s.Inspect(ctx, &lockv1.InspectRequest{Backend: nope})
			return err
		}, "key"},
		{"Watch, neither key nor prefix", func() error {
			return s.Watch(ctx, &lockv1.WatchRequest{Backend: nope}, nil)
		}, "key"},
		{"Watch, key and prefix", func() error {
			return s.Watch(ctx, &lockv1.WatchRequest{Backend: nope, Key: "k", Prefix: "p"}, nil)
		}, "prefix"},
		{"Batch acquire, a wait", func() error {
			return batch(&lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Acquire{
				Acquire: &lockv1.AcquireRequest{Backend: nope, Key: "k", Wait: durationpb.New(1e9)}}})
		}, "wait"},
		{"Batch release, empty key", func() error {
			return batch(&lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Release{
				Release: &lockv1.ReleaseRequest{Backend: nope, Owner: owner}}})
		}, "key"},
		{"Batch renew, no owner", func() error {
			return batch(&lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Renew{
				Renew: &lockv1.RenewRequest{Backend: nope, Key: "k"}}})
		}, "owner"},
		{"Batch inspect, empty key", func() error {
			return batch(&lockv1.BatchOperation{Operation: &lockv1.BatchOperation_Inspect{
				Inspect: &lockv1.InspectRequest{Backend: nope}}})
		}, "key"},
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
	// The same request with good fields does reach the backend's name and is refused there.
	if _, err := s.Inspect(ctx, &lockv1.InspectRequest{Backend: nope, Key: "k"}); err == nil || !strings.Contains(err.Error(), "backend: ") {
		t.Fatalf("Inspect with good fields and an unknown backend = %v, want the backend refused", err)
	}
}
