package idgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	idgenv1 "github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/services/idgen/segment"
	"github.com/coordkit/coordkit/services/idgen/snowflake"
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
	closers  service.Closers // engines and stores, closed in reverse order
}

var _ idgenv1connect.IdServiceHandler = (*Service)(nil)

// source makes n IDs of one mode as strings: every mode goes through the same batch path.
type source func(ctx context.Context, tag string, n int) ([]string, error)

// NewService returns the service over the configured engines. Close closes those engines
// that have a Close method.
func NewService(cfg Config) *Service {
	s := &Service{
		sources: map[idgenv1.Mode]source{
			idgenv1.Mode_MODE_UUID_V4: uuids(uuid.NewRandom),
			idgenv1.Mode_MODE_UUID_V7: uuids(uuid.NewV7),
		},
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
	if cfg.Snowflake != nil {
		g := cfg.Snowflake
		s.sources[idgenv1.Mode_MODE_SNOWFLAKE] = numeric(func(ctx context.Context, _ string, n int) ([]int64, error) {
			return g.Next(ctx, n)
		})
	}
	if cfg.Segments != nil {
		s.sources[idgenv1.Mode_MODE_SEGMENT] = numeric(cfg.Segments.Next)
	}
	if cfg.RedisIncr != nil {
		s.sources[idgenv1.Mode_MODE_REDIS_INCR] = numeric(cfg.RedisIncr.Next)
	}
	// Snowflake last: its Close releases the worker-id lease, which needs its store open.
	for _, e := range []any{cfg.Snowflake, cfg.RedisIncr, cfg.Segments} {
		if c, ok := e.(interface{ Close() error }); ok {
			s.closers.Add(c.Close)
		}
	}
	return s
}

// Close stops the engines (background reservations, lease renewal, releasing the worker id)
// and closes the stores OpenService opened. Later calls do nothing.
func (s *Service) Close() error { return s.closers.Close() }

func uuids(gen func() (uuid.UUID, error)) source {
	return func(_ context.Context, _ string, n int) ([]string, error) {
		out := make([]string, n)
		for i := range out {
			u, err := gen()
			if err != nil {
				return nil, fmt.Errorf("idgen: uuid: %w", err)
			}
			out[i] = u.String()
		}
		return out, nil
	}
}

// numeric formats a numeric engine's IDs as decimal strings, which JSON clients read without
// losing precision.
func numeric(next func(ctx context.Context, tag string, n int) ([]int64, error)) source {
	return func(ctx context.Context, tag string, n int) ([]string, error) {
		ids, err := next(ctx, tag, n)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = strconv.FormatInt(id, 10)
		}
		return out, nil
	}
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
	ids, err := src(ctx, p.tag, p.count)
	mode := p.mode.String()
	if err != nil {
		s.metrics.errors.WithLabelValues(mode).Inc()
		return nil, toConnect(ctx, err, p.tag)
	}
	s.metrics.issued.WithLabelValues(mode).Add(float64(len(ids)))
	return &idgenv1.NextResponse{Ids: ids}, nil
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
		return nil, errNoSegments
	}
	t, err := s.segments.CreateTag(ctx, p.tag, p.start, p.step, p.description)
	if err != nil {
		return nil, toConnect(ctx, err, p.tag)
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
		return nil, errNoSegments
	}
	t, err := s.segments.UpdateTag(ctx, p.tag, p.step, p.description)
	if err != nil {
		return nil, toConnect(ctx, err, p.tag)
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
		return nil, errNoSegments
	}
	t, err := s.segments.DeleteTag(ctx, req.GetTag())
	if err != nil {
		return nil, toConnect(ctx, err, req.GetTag())
	}
	s.log.InfoContext(ctx, "idgen: deleted segment tag", "tag", req.GetTag(), "max_id", t.MaxID)
	return &idgenv1.DeleteTagResponse{Tag: tagToProto(t)}, nil
}

// errNoSegments answers the tag RPCs on an instance without segment mode.
var errNoSegments = connect.NewError(connect.CodeFailedPrecondition,
	errors.New("tag: segment mode is not configured on this service"))

// ListTags implements IdServiceHandler.
func (s *Service) ListTags(ctx context.Context, _ *idgenv1.ListTagsRequest) (*idgenv1.ListTagsResponse, error) {
	if s.segments == nil {
		return nil, errNoSegments
	}
	tags, err := s.segments.Tags(ctx)
	if err != nil {
		return nil, toConnect(ctx, err, "")
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

// toConnect maps the ID engines' own errors to Connect codes; everything the services share
// (unavailable stores, shutdown, context endings) goes through server.Error, the one mapping.
// tag is named in not_found, already_exists and failed_precondition messages.
func toConnect(ctx context.Context, err error, tag string) error {
	var below *segment.BelowTombstone
	switch {
	case errors.Is(err, segment.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("tag: %s does not exist; create it with CreateTag (coord id create-tag)", server.Quote(tag)))
	case errors.Is(err, segment.ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("tag: %s already exists", server.Quote(tag)))
	case errors.As(err, &below):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"start: %d is below %d, where the deleted tag %s stopped: IDs below it may have been issued; leave start unset to continue there",
			below.Start, below.MaxID, server.Quote(tag)))
	case errors.Is(err, snowflake.ErrLeaseLost), errors.Is(err, snowflake.ErrClockBackwards):
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return server.Error(ctx, err)
}
