package idgen_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestDescriptionWithNUL sends a tag description holding NUL, which is valid UTF-8 but which
// PostgreSQL's TEXT cannot hold: every store answers it the same way, invalid_argument naming
// description, never unavailable (which clients retry) on one store and accepted on another.
func TestDescriptionWithNUL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c := startInstance(t, sc.open(t)).client
			tag := testenv.Prefix(t)
			for _, tc := range []struct {
				name string
				call func() error
			}{
				{"create", func() error {
					_, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag + "-new", Description: "a\x00b"})
					return err
				}},
				{"update", func() error {
					_, err := c.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag})
					noErr(t, err)
					_, err = c.UpdateTag(ctx, &idgenv1.UpdateTagRequest{Tag: tag, Description: proto.String("\x00")})
					return err
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					wantCode(t, tc.call(), connect.CodeInvalidArgument, "description")
				})
			}
		})
	}
}
