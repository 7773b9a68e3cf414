package idgen

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
)

// TestFieldErrorsBeforeEngine: a request with a bad field is answered invalid_argument naming
// that field even when the engine it needs is not configured here (its mode, or segment
// mode for the tag RPCs): a handler checks the request's own fields, then finds the engine,
// then calls it. The service has no engine at all, so any engine call would crash.
func TestFieldErrorsBeforeEngine(t *testing.T) {
	t.Parallel()
	s := &Service{}
	ctx := context.Background()
	step := func(n int64) *int64 { return &n }
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"Next segment, empty tag", func() error {
			_, err := s.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Count: 1})
			return err
		}, "tag"},
		{"Next snowflake, a tag", func() error {
			_, err := s.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SNOWFLAKE, Tag: "t", Count: 1})
			return err
		}, "tag"},
		{"Next redis incr, count out of range", func() error {
			_, err := s.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_REDIS_INCR, Tag: "t", Count: MaxCount + 1})
			return err
		}, "count"},
		{"CreateTag, step out of range", func() error {
			_, err := s.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: "t", Step: MaxStep + 1})
			return err
		}, "step"},
		{"UpdateTag, nothing to update", func() error {
			_, err := s.UpdateTag(ctx, &idgenv1.UpdateTagRequest{Tag: "t"})
			return err
		}, "step"},
		{"UpdateTag, step out of range", func() error {
			_, err := s.UpdateTag(ctx, &idgenv1.UpdateTagRequest{Tag: "t", Step: step(0)})
			return err
		}, "step"},
		{"DeleteTag, empty tag", func() error {
			_, err := s.DeleteTag(ctx, &idgenv1.DeleteTagRequest{})
			return err
		}, "tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.HasPrefix(ce.Message(), tt.field+":") {
				t.Fatalf("got %v; want invalid_argument naming %s, checked before the missing engine", err, tt.field)
			}
		})
	}
	// The same requests with good fields do reach the engine lookup and are refused there.
	var ce *connect.Error
	if _, err := s.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Tag: "t", Count: 1}); !errors.As(err, &ce) || !strings.HasPrefix(ce.Message(), "mode:") {
		t.Fatalf("Next with good fields on a service without segment mode = %v, want mode refused", err)
	}
	if _, err := s.DeleteTag(ctx, &idgenv1.DeleteTagRequest{Tag: "t"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("DeleteTag with good fields on a service without segment mode = %v, want failed_precondition", err)
	}
}
