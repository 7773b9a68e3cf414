// Package idgen is coordkit's ID service: the Connect handler over engines already started,
// and the interfaces of those engines (idgenservice opens the stores and starts them). The
// engines live in subpackages, one per mechanism: snowflake (with worker-id leases from
// workerid), segment (Meituan Leaf on SQLite or MySQL), redisincr (Redis INCRBY blocks) and
// uuidgen (UUID v4 and v7); block is the double buffer segment and redisincr share. The
// numeric engines hand out IDs as ranges of consecutive numbers, which Next sends as they
// are (NextRequest.ranges, what the Go SDK asks for) or as decimal strings.
package idgen

import (
	"context"

	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
)

// Sequence hands out numeric IDs of a tag: n of them, strictly increasing, from one
// reservation where the engine holds enough, appended to dst as ranges of consecutive IDs.
// segment.Engine and redisincr.Engine implement it.
type Sequence interface {
	AppendRanges(ctx context.Context, dst []block.Range, tag string, n int) ([]block.Range, error)
}

// Segments is the segment engine: a Sequence whose tags are administered. segment.Engine
// implements it.
type Segments interface {
	Sequence
	// CreateTag creates a tag whose first ID is start (0: 1, or where a deleted tag of the
	// name stopped), with the configured step.
	CreateTag(ctx context.Context, tag string, start, step int64, description string) (segment.TagState, error)
	// Tags lists every tag with this instance's buffer state.
	Tags(ctx context.Context) ([]segment.TagState, error)
	// UpdateTag sets a tag's step and description; nil leaves a field as it is.
	UpdateTag(ctx context.Context, tag string, step *int64, description *string) (segment.TagState, error)
	// DeleteTag deletes a tag, keeping its max_id as a tombstone a re-created tag starts above.
	DeleteTag(ctx context.Context, tag string) (segment.TagState, error)
}

// Snowflake issues snowflake IDs, n of them in increasing order, appended to dst as runs of
// consecutive IDs; snowflake.Generator implements it.
type Snowflake interface {
	AppendRanges(ctx context.Context, dst []snowflake.Range, n int) ([]snowflake.Range, error)
}
