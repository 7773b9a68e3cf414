package client

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
)

// notFound is an ID service that knows no tag.
type notFound struct{ idgenv1connect.IdServiceClient }

func (notFound) Next(context.Context, *idgenv1.NextRequest) (*idgenv1.NextResponse, error) {
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("tag not found"))
}

// TestIDsForgetFailedTags: a (mode, tag) whose fetch fails keeps no buffer, so a caller
// passing tags from its own input does not grow the client without bound (the service's
// block.Pool retires such buffers for the same reason).
func TestIDsForgetFailedTags(t *testing.T) {
	t.Parallel()
	x := newIDs(notFound{}, 0, 0)
	for i := range 10000 {
		if _, err := x.Next(context.Background(), idgenv1.Mode_MODE_SEGMENT, fmt.Sprintf("no-such-tag-%d", i)); err == nil {
			t.Fatal("no error")
		}
	}
	n := 0
	x.buffers.Range(func(any, any) bool { n++; return true })
	if n > 0 {
		t.Errorf("%d buffers kept for tags that do not exist", n)
	}
}
