package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/config"
	idgenv1 "github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/proto/gen/coordkit/idgen/v1/idgenv1connect"
)

const idUsage = `usage:
  coord id next [--mode snowflake] [--tag TAG] [--count 1] [flags]
  coord id decode ID [flags]
  coord id tags [flags]
  coord id create-tag TAG [--start 1] [--step 1000] [--description TEXT] [flags]

Modes: uuid-v4, uuid-v7, snowflake, segment (tag created with create-tag), redis-incr (any tag).
Common flags: --server URL, --json, --timeout D.
`

// modeNames maps the CLI's mode names to the API's.
var modeNames = map[string]idgenv1.Mode{
	"uuid-v4":    idgenv1.Mode_MODE_UUID_V4,
	"uuid-v7":    idgenv1.Mode_MODE_UUID_V7,
	"snowflake":  idgenv1.Mode_MODE_SNOWFLAKE,
	"segment":    idgenv1.Mode_MODE_SEGMENT,
	"redis-incr": idgenv1.Mode_MODE_REDIS_INCR,
}

// parseMode accepts a CLI mode name, or the API's enum name (MODE_SNOWFLAKE).
func parseMode(s string) (idgenv1.Mode, error) {
	if m, ok := modeNames[strings.ToLower(strings.ReplaceAll(s, "_", "-"))]; ok {
		return m, nil
	}
	if v, ok := idgenv1.Mode_value[strings.ToUpper(s)]; ok && v != 0 {
		return idgenv1.Mode(v), nil
	}
	return 0, fmt.Errorf("--mode: unknown mode %q (uuid-v4, uuid-v7, snowflake, segment, redis-incr)", s)
}

func runID(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, idUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	fs := flag.NewFlagSet("id "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	serverURL := fs.String("server", "http://127.0.0.1:8080", "base URL of a coordkit service")
	asJSON := fs.Bool("json", false, "print the response as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline for the call")
	mode := fs.String("mode", "snowflake", "next: uuid-v4, uuid-v7, snowflake, segment or redis-incr")
	tag := fs.String("tag", "", "next: the tag of segment and redis-incr")
	count := fs.Uint("count", 1, "next: how many IDs, 1 to 10000")
	start := fs.Int64("start", 1, "create-tag: the first ID")
	step := fs.Int64("step", 1000, "create-tag: the configured segment size")
	description := fs.String("description", "", "create-tag: a note for operators")

	var positional string
	switch verb {
	case "decode", "create-tag":
		fs.Usage = config.Usage(fs, "coord id "+verb+" ARG [flags]")
		p, err := parseWithKey(fs, args[1:])
		if err != nil {
			return err
		}
		positional = p
	case "next", "tags":
		fs.Usage = config.Usage(fs, "coord id "+verb+" [flags]")
		if err := config.Parse(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("id %s: unexpected arguments %q", verb, fs.Args())
		}
	default:
		fmt.Fprint(stderr, idUsage)
		return fmt.Errorf("unknown id command %q", verb)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ids := idgenv1connect.NewIdServiceClient(client.DefaultHTTPClient(), *serverURL)

	var res proto.Message
	switch verb {
	case "next":
		m, err := parseMode(*mode)
		if err != nil {
			return err
		}
		if *count > 1<<32-1 {
			return fmt.Errorf("--count: %d is too large", *count)
		}
		r, err := ids.Next(ctx, &idgenv1.NextRequest{Mode: m, Tag: *tag, Count: uint32(*count)})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			for _, id := range r.GetIds() {
				fmt.Fprintln(stdout, id)
			}
		}
	case "decode":
		r, err := ids.Decode(ctx, &idgenv1.DecodeRequest{Id: positional})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			fmt.Fprintf(stdout, "snowflake %s\n", positional)
			fmt.Fprintf(stdout, "  time       %s\n", r.GetTime().AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00"))
			fmt.Fprintf(stdout, "  worker id  %d\n", r.GetWorkerId())
			fmt.Fprintf(stdout, "  sequence   %d\n", r.GetSequence())
		}
	case "tags":
		r, err := ids.ListTags(ctx, &idgenv1.ListTagsRequest{})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			printTags(stdout, r.GetTags())
		}
	case "create-tag":
		r, err := ids.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: positional, Start: *start, Step: *step, Description: *description})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			t := r.GetTag()
			fmt.Fprintf(stdout, "created tag %s: first ID %d, step %d\n", t.GetTag(), t.GetMaxId(), t.GetStep())
		}
	}
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(out))
	}
	return nil
}

// printTags prints one line per tag: the stored row, then this instance's buffer.
func printTags(w io.Writer, tags []*idgenv1.TagState) {
	if len(tags) == 0 {
		fmt.Fprintln(w, "no segment tags; create one with: coord id create-tag TAG")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "tag\tmax id\tstep\tcurrent segment\tposition\tnext\tdynamic step\tlast refill\tdescription")
	for _, t := range tags {
		cur, pos, next, refill := "-", "-", "not loaded", "-"
		if c := t.GetCurrent(); c != nil {
			cur, pos = fmt.Sprintf("[%d, %d)", c.GetStart(), c.GetEnd()), fmt.Sprint(c.GetPosition())
			refill = t.GetLastRefill().AsTime().Local().Format(time.DateTime)
		}
		if n := t.GetNext(); t.GetNextLoaded() && n != nil {
			next = fmt.Sprintf("[%d, %d)", n.GetStart(), n.GetEnd())
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", t.GetTag(), t.GetMaxId(), t.GetStep(), cur, pos, next,
			t.GetDynamicStep(), refill, t.GetDescription())
	}
	tw.Flush()
}
