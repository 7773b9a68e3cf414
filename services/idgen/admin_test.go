package idgen_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestTagAdmin runs a tag's life through the API on every store with two instances: update,
// delete while the other instance holds buffered IDs, re-create, and no ID twice.
func TestTagAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			cfg := sc.open(t)
			a, b := startInstance(t, cfg).client, startInstance(t, cfg).client
			tag := testenv.Prefix(t)
			seen := map[string]bool{}
			next := func(c interface {
				Next(context.Context, *idgenv1.NextRequest) (*idgenv1.NextResponse, error)
			}, n uint32) error {
				res, err := c.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Tag: tag, Count: n})
				for _, id := range res.GetIds() {
					if seen[id] {
						t.Fatalf("ID %s issued twice", id)
					}
					seen[id] = true
				}
				return err
			}

			_, err := a.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Step: 100, Description: "first"})
			noErr(t, err)
			noErr(t, next(a, 50)) // a now buffers segments of the tag

			up, err := b.UpdateTag(ctx, &idgenv1.UpdateTagRequest{Tag: tag, Step: proto.Int64(2000)})
			noErr(t, err)
			if up.GetTag().GetStep() != 2000 || up.GetTag().GetDescription() != "first" {
				t.Fatalf("UpdateTag(step) = %v, want step 2000 and the description kept", up.GetTag())
			}
			up, err = b.UpdateTag(ctx, &idgenv1.UpdateTagRequest{Tag: tag, Description: proto.String("second")})
			noErr(t, err)
			if up.GetTag().GetStep() != 2000 || up.GetTag().GetDescription() != "second" {
				t.Fatalf("UpdateTag(description) = %v, want step 2000 and description second", up.GetTag())
			}

			del, err := b.DeleteTag(ctx, &idgenv1.DeleteTagRequest{Tag: tag})
			noErr(t, err)
			stop := del.GetTag().GetMaxId()
			_, err = b.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Tag: tag, Count: 1})
			wantCode(t, err, connect.CodeNotFound, "tag")
			list, err := a.ListTags(ctx, &idgenv1.ListTagsRequest{})
			noErr(t, err)
			for _, s := range list.GetTags() {
				if s.GetTag() == tag {
					t.Fatalf("ListTags lists the deleted tag: %v", s)
				}
			}
			_, err = b.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Start: stop - 1})
			wantCode(t, err, connect.CodeFailedPrecondition, "start")

			again, err := b.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: tag, Step: 100})
			noErr(t, err)
			// At stop, or above when a's prefetch begun before the delete landed after the
			// re-create and took a range of its own; never below.
			if again.GetTag().GetMaxId() < stop {
				t.Fatalf("re-created tag starts at %d, want %d (or above) where the deleted one stopped", again.GetTag().GetMaxId(), stop)
			}
			// a still holds IDs of the deleted tag (below stop); b issues from stop on.
			for range 20 {
				noErr(t, next(a, 30))
				noErr(t, next(b, 30))
			}
		})
	}
}
