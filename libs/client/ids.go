package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
)

// Block sizes of IDs: how many IDs one call to the ID service fetches.
const (
	// DefaultIDBlock is the first and smallest block unless WithIDBlock says otherwise.
	DefaultIDBlock = 1000
	// MaxIDBlock is the largest block: the service's limit on one Next call.
	MaxIDBlock = 10000
)

// The time since the previous fetch of a (mode, tag) tells how fast its blocks are used:
// under idFastBlock the next block is twice as large, up to the largest block; at
// idSlowBlock or more it is half as large, down to the smallest. So a busy caller makes
// about one call to the service per second for each mode and tag, and one that exits loses
// about a second's worth of IDs. The second fetch always doubles: it starts when the first
// block is 10% used, moments after the first fetch.
const (
	idFastBlock = time.Second
	idSlowBlock = time.Minute
)

// idFetchTimeout bounds one fetch: a fetch runs in a goroutine of its own, which never
// outlives it, whether or not anyone still waits for it.
const idFetchTimeout = 10 * time.Second

// WithIDBlock sets the first and smallest block IDs fetches, 1 to MaxIDBlock; default
// DefaultIDBlock. Blocks grow up to WithIDMaxBlock while they are used up within a second.
func WithIDBlock(n int) Option { return func(o *options) { o.idBlock = n } }

// WithIDMaxBlock sets the largest block IDs fetches, 1 to MaxIDBlock (the default); set it
// to WithIDBlock's size for blocks of one fixed size.
func WithIDMaxBlock(n int) Option { return func(o *options) { o.idMaxBlock = n } }

// IDs hands out IDs of the ID service from blocks it fetches ahead of need: Next costs a
// call to the service only when the block in memory is used up and the next one has not
// arrived, which for one caller is the first call and otherwise only when the service
// cannot keep up. It keeps two blocks per mode and tag, the one it hands out and the next:
// once 10% of the current one is handed out, the next is fetched in the background (as the
// service's segment buffers do with the database). Every ID is handed out once.
//
// What a block means for each mode:
//   - MODE_UUID_V4: unique; nothing else to know.
//   - MODE_UUID_V7: unique. The time a UUID carries is when the service made its block, not
//     when Next returned it, so UUIDs sort by fetch, not by use, across clients.
//   - MODE_SNOWFLAKE: unique. The time an ID carries is when the service issued its block,
//     not when Next returned it. IDs of one block increase; blocks of different clients
//     interleave, so IDs of several clients are not in the order they were handed out.
//   - MODE_SEGMENT and MODE_REDIS_INCR: unique across clients and service instances. IDs
//     increase within what one client gets from one service instance, not across clients.
//     A client that exits loses the rest of its blocks: the IDs leave a gap and are never
//     issued again.
//
// A background fetch that fails is retried by a later Next, after a pause that grows from
// 10ms to a second while the failures go on; its error reaches a caller only when the
// blocks are used up and that caller's own fetch fails too, as the service's Connect error.
// A fetch is one goroutine that ends with the call (within 10 seconds), so an IDs that is
// dropped leaves nothing running. It is safe for concurrent use.
type IDs struct {
	svc                idgenv1connect.IdServiceClient
	minBlock, maxBlock int
	buffers            sync.Map // idKey → *idBuffer
}

// idKey names one stream of IDs.
type idKey struct {
	mode idgenv1.Mode
	tag  string
}

func newIDs(svc idgenv1connect.IdServiceClient, minBlock, maxBlock int) *IDs {
	if minBlock <= 0 {
		minBlock = DefaultIDBlock
	}
	if maxBlock <= 0 {
		maxBlock = MaxIDBlock
	}
	minBlock = min(minBlock, MaxIDBlock)
	maxBlock = min(max(maxBlock, minBlock), MaxIDBlock)
	return &IDs{svc: svc, minBlock: minBlock, maxBlock: maxBlock}
}

// IDs hands out IDs from blocks fetched ahead of need; see IDs. The value is shared: every
// call returns the same one, so all of a Client's callers draw on the same blocks.
func (c *Client) IDs() *IDs { return c.ids }

// IDService is the raw ID service API: Next straight from the service, Decode and the
// segment tag administration.
func (c *Client) IDService() idgenv1connect.IdServiceClient { return c.ids.svc }

// Next returns one ID of mode; tag names the sequence of MODE_SEGMENT and MODE_REDIS_INCR
// and is empty for the other modes. Numeric IDs come as decimal strings, as the service
// sends them.
func (x *IDs) Next(ctx context.Context, mode idgenv1.Mode, tag string) (string, error) {
	b := x.buffer(mode, tag)
	id, err := b.one(ctx)
	if err != nil {
		x.forget(b)
	}
	return id, err
}

// NextN returns n IDs of mode, in the order Next would have returned them one by one: a
// large n waits for as many blocks as it takes. On an error it returns the IDs it had taken
// with the error; they are handed out to no one else.
func (x *IDs) NextN(ctx context.Context, mode idgenv1.Mode, tag string, n int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	b := x.buffer(mode, tag)
	ids, err := b.many(ctx, n)
	if err != nil {
		x.forget(b)
	}
	return ids, err
}

// forget drops b after a failed call when it holds nothing and fetches nothing: a tag that
// does not exist (or a mode the service lacks) leaves no buffer behind, so asking for many
// such tags does not grow the client.
func (x *IDs) forget(b *idBuffer) {
	b.mu.Lock()
	empty := b.cur.left == 0 && b.next.left == 0 && b.fetching == nil
	b.mu.Unlock()
	if empty {
		x.buffers.CompareAndDelete(b.key, b)
	}
}

// buffer returns the buffer of (mode, tag), creating it on first use.
func (x *IDs) buffer(mode idgenv1.Mode, tag string) *idBuffer {
	k := idKey{mode, tag}
	if v, ok := x.buffers.Load(k); ok {
		return v.(*idBuffer)
	}
	v, _ := x.buffers.LoadOrStore(k, &idBuffer{ids: x, key: k, size: x.minBlock})
	return v.(*idBuffer)
}

// fetch calls the service for a block of n IDs of k: numeric modes as ranges, which a
// service older than ranges answers with strings instead.
//
// A call that fails as unavailable is sent once more at once: the usual cause is a pooled
// connection that the network or the server closed while it sat idle (after an outage, the
// first call on each such connection fails), and sending Next again is always safe: a block
// whose answer was lost only leaves a gap, never an ID issued twice.
func (x *IDs) fetch(ctx context.Context, k idKey, n int) (idBlock, error) {
	req := &idgenv1.NextRequest{Mode: k.mode, Tag: k.tag, Count: uint32(n), Ranges: numericMode(k.mode)}
	res, err := x.svc.Next(ctx, req)
	if connect.CodeOf(err) == connect.CodeUnavailable && ctx.Err() == nil {
		res, err = x.svc.Next(ctx, req)
	}
	if err != nil {
		return idBlock{}, err
	}
	b := idBlock{strs: res.GetIds()}
	if len(b.strs) == 0 {
		b.ranges = make([]idRange, 0, len(res.GetRanges()))
		for _, r := range res.GetRanges() {
			if r.GetEnd() > r.GetStart() {
				b.ranges = append(b.ranges, idRange{r.GetStart(), r.GetEnd()})
				b.left += int(r.GetEnd() - r.GetStart())
			}
		}
		if len(b.ranges) > 0 {
			b.pos = b.ranges[0].start
		}
	} else {
		b.left = len(b.strs)
	}
	if b.left == 0 {
		return idBlock{}, errNoIDs
	}
	b.mark = b.left - (b.left+9)/10
	return b, nil
}

// errNoIDs is a service that answered Next with no IDs at all.
var errNoIDs = connect.NewError(connect.CodeInternal, errors.New("client: the ID service answered Next with no IDs"))

// numericMode reports whether the service can send mode's IDs as ranges.
func numericMode(mode idgenv1.Mode) bool {
	switch mode {
	case idgenv1.Mode_MODE_SNOWFLAKE, idgenv1.Mode_MODE_SEGMENT, idgenv1.Mode_MODE_REDIS_INCR:
		return true
	}
	return false
}

// ctxError is the error of a Next that stopped waiting because ctx ended: a Connect error
// with the code the call itself would have ended with, which errors.Is also matches with
// context.Canceled or context.DeadlineExceeded.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}
