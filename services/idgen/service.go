package idgen

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/idgen/block"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
	"github.com/coordkit/coordkit/services/idgen/uuidgen"
)

// Config configures a Service. UUID modes need nothing; every other mode is enabled by its
// engine, and a request for a mode whose engine is nil is invalid_argument naming mode.
type Config struct {
	// Snowflake enables MODE_SNOWFLAKE.
	Snowflake Snowflake
	// Segments enables MODE_SEGMENT and the tag admin RPCs.
	Segments Segments
	// RedisIncr enables MODE_REDIS_INCR.
	RedisIncr Sequence
	// Clock is the time Decode compares IDs with; default time.Now.
	Clock func() time.Time
	// Registerer receives the ID metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Logger logs what an operator should see; default slog.Default().
	Logger *slog.Logger
}

// Service implements coordkit.idgen.v1.IdService.
type Service struct {
	sources  map[idgenv1.Mode]source
	segments Segments
	clock    func() time.Time
	metrics  *metrics
	log      *slog.Logger
}

var _ idgenv1connect.IdServiceHandler = (*Service)(nil)

// source makes n IDs of one mode: the UUID modes as strings, the numeric modes as ranges of
// consecutive IDs, which Next sends as they are or as one decimal string per ID.
type source struct {
	uuids  func(n int) []string
	ranges func(ctx context.Context, dst []block.Range, tag string, n int) ([]block.Range, error)
}

// NewService returns the service over the configured engines, which the caller started and
// closes after the service (idgenservice.Open does).
func NewService(cfg Config) *Service {
	s := &Service{
		segments: cfg.Segments,
		clock:    cfg.Clock,
		metrics:  newMetrics(cfg.Registerer),
		log:      cfg.Logger,
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	// UUID version 7 carries the real time, whatever the test clock of Decode.
	u := uuidgen.New(nil)
	s.sources = map[idgenv1.Mode]source{
		idgenv1.Mode_MODE_UUID_V4: {uuids: func(n int) []string { return u.Append(make([]string, 0, n), n, false) }},
		idgenv1.Mode_MODE_UUID_V7: {uuids: func(n int) []string { return u.Append(make([]string, 0, n), n, true) }},
	}
	if cfg.Snowflake != nil {
		g := cfg.Snowflake
		s.sources[idgenv1.Mode_MODE_SNOWFLAKE] = source{ranges: func(ctx context.Context, dst []block.Range, _ string, n int) ([]block.Range, error) {
			runs, err := g.AppendRanges(ctx, make([]snowflake.Range, 0, n/(snowflake.MaxSequence+1)+2), n)
			for _, r := range runs {
				dst = append(dst, block.Range(r))
			}
			return dst, err
		}}
	}
	if cfg.Segments != nil {
		s.sources[idgenv1.Mode_MODE_SEGMENT] = source{ranges: cfg.Segments.AppendRanges}
	}
	if cfg.RedisIncr != nil {
		s.sources[idgenv1.Mode_MODE_REDIS_INCR] = source{ranges: cfg.RedisIncr.AppendRanges}
	}
	return s
}

// Close stops the service. It has no background work of its own, and it closes no engine:
// whoever started the engines (idgenservice.Open) stops them after it.
func (s *Service) Close() error { return nil }

// decimal formats the IDs of rs, n in all, as decimal strings, which JSON clients read
// without losing precision. Their text is one allocation: the strings go out in one
// response and are dropped together.
func decimal(rs []block.Range, n int) []string {
	out := make([]string, 0, n)
	if n == 1 {
		return append(out, strconv.FormatInt(rs[0].Start, 10))
	}
	text := make([]byte, 0, n*(maxDecimalDigits+1))
	ends := make([]int32, 0, n)
	for _, r := range rs {
		for id := r.Start; id < r.End; id++ {
			text = strconv.AppendInt(text, id, 10)
			ends = append(ends, int32(len(text)))
		}
	}
	all, start := string(text), int32(0)
	for _, end := range ends {
		out = append(out, all[start:end])
		start = end
	}
	return out
}

// rangesToProto converts rs for a response.
func rangesToProto(rs []block.Range) []*idgenv1.IdRange {
	out := make([]*idgenv1.IdRange, len(rs))
	all := make([]idgenv1.IdRange, len(rs)) // one allocation for all of them
	for i, r := range rs {
		all[i].Start, all[i].End = r.Start, r.End
		out[i] = &all[i]
	}
	return out
}

// Next implements IdServiceHandler.
func (s *Service) Next(ctx context.Context, req *idgenv1.NextRequest) (*idgenv1.NextResponse, error) {
	p, err := parseNext(req)
	if err != nil {
		return nil, err
	}
	src, ok := s.sources[p.mode]
	if !ok {
		return nil, server.InvalidField("mode", "%s is not configured on this service", p.mode)
	}
	mode := p.mode.String()
	res := &idgenv1.NextResponse{}
	if src.uuids != nil {
		res.Ids = src.uuids(p.count)
	} else {
		var small [4]block.Range // a batch of one millisecond run or segment, or a little more
		rs, err := src.ranges(ctx, small[:0], p.tag, p.count)
		if err != nil {
			s.metrics.errors.WithLabelValues(mode).Inc()
			return nil, server.Error(ctx, namingTag(err, p.tag))
		}
		if req.GetRanges() {
			res.Ranges = rangesToProto(rs)
		} else {
			res.Ids = decimal(rs, p.count)
		}
	}
	s.metrics.issued.WithLabelValues(mode).Add(float64(p.count))
	return res, nil
}

// Decode implements IdServiceHandler.
func (s *Service) Decode(_ context.Context, req *idgenv1.DecodeRequest) (*idgenv1.DecodeResponse, error) {
	id, err := parseDecode(req)
	if err != nil {
		return nil, err
	}
	d, err := snowflake.Decode(id, s.clock())
	if err != nil {
		return nil, server.InvalidField("id", "%v", err)
	}
	return &idgenv1.DecodeResponse{
		Time: timestamppb.New(d.Time), WorkerId: uint32(d.Worker), Sequence: uint32(d.Sequence),
	}, nil
}

// CreateTag implements IdServiceHandler.
func (s *Service) CreateTag(ctx context.Context, req *idgenv1.CreateTagRequest) (*idgenv1.CreateTagResponse, error) {
	p, err := parseCreateTag(req)
	if err != nil {
		return nil, err
	}
	if s.segments == nil {
		return nil, server.Error(ctx, errNoSegments)
	}
	t, err := s.segments.CreateTag(ctx, p.tag, p.start, p.step, p.description)
	if err != nil {
		return nil, server.Error(ctx, namingTag(err, p.tag))
	}
	s.log.InfoContext(ctx, "idgen: created segment tag", "tag", p.tag, "start", t.MaxID, "step", p.step)
	return &idgenv1.CreateTagResponse{Tag: tagToProto(t)}, nil
}

// UpdateTag implements IdServiceHandler.
func (s *Service) UpdateTag(ctx context.Context, req *idgenv1.UpdateTagRequest) (*idgenv1.UpdateTagResponse, error) {
	p, err := parseUpdateTag(req)
	if err != nil {
		return nil, err
	}
	if s.segments == nil {
		return nil, server.Error(ctx, errNoSegments)
	}
	t, err := s.segments.UpdateTag(ctx, p.tag, p.step, p.description)
	if err != nil {
		return nil, server.Error(ctx, namingTag(err, p.tag))
	}
	s.log.InfoContext(ctx, "idgen: updated segment tag", "tag", p.tag, "step", t.Step)
	return &idgenv1.UpdateTagResponse{Tag: tagToProto(t)}, nil
}

// DeleteTag implements IdServiceHandler.
func (s *Service) DeleteTag(ctx context.Context, req *idgenv1.DeleteTagRequest) (*idgenv1.DeleteTagResponse, error) {
	if err := validateTag(req.GetTag()); err != nil {
		return nil, err
	}
	if s.segments == nil {
		return nil, server.Error(ctx, errNoSegments)
	}
	t, err := s.segments.DeleteTag(ctx, req.GetTag())
	if err != nil {
		return nil, server.Error(ctx, namingTag(err, req.GetTag()))
	}
	s.log.InfoContext(ctx, "idgen: deleted segment tag", "tag", req.GetTag(), "max_id", t.MaxID)
	return &idgenv1.DeleteTagResponse{Tag: tagToProto(t)}, nil
}

// errNoSegments answers the tag RPCs on an instance without segment mode.
var errNoSegments = server.NewError(connect.CodeFailedPrecondition, "tag: segment mode is not configured on this service")

// ListTags implements IdServiceHandler.
func (s *Service) ListTags(ctx context.Context, _ *idgenv1.ListTagsRequest) (*idgenv1.ListTagsResponse, error) {
	if s.segments == nil {
		return nil, server.Error(ctx, errNoSegments)
	}
	tags, err := s.segments.Tags(ctx)
	if err != nil {
		return nil, server.Error(ctx, err)
	}
	out := &idgenv1.ListTagsResponse{Tags: make([]*idgenv1.TagState, len(tags))}
	for i, t := range tags {
		out.Tags[i] = tagToProto(t)
	}
	return out, nil
}

func tagToProto(t segment.TagState) *idgenv1.TagState {
	out := &idgenv1.TagState{
		Tag: t.Tag.Tag, MaxId: t.MaxID, Step: t.Step, Description: t.Description,
		UpdatedAt: timestamppb.New(t.UpdatedAt), DynamicStep: t.Step,
	}
	if t.Buffered {
		b := t.Buffer
		out.Current = &idgenv1.SegmentRange{Start: b.Current.Start, End: b.Current.End, Position: b.Position}
		if b.NextLoaded {
			out.Next = &idgenv1.SegmentRange{Start: b.Next.Start, End: b.Next.End, Position: b.Next.Start}
		}
		out.NextLoaded = b.NextLoaded
		out.DynamicStep = max(b.Step, t.Step) // the store never reserves less than the step
		out.LastRefill = timestamppb.New(b.LastRefill)
	}
	return out
}
