package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
)

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

// newIDCmd builds `coord id` and its subcommands.
func newIDCmd() *cobra.Command {
	cf := &clientFlags{}
	c := newGroupCmd("id", "call the ID service: next, decode, tags, create-tag, update-tag, delete-tag",
		newIDNextCmd(cf), newIDDecodeCmd(cf), newIDTagsCmd(cf), newIDCreateTagCmd(cf), newIDUpdateTagCmd(cf), newIDDeleteTagCmd(cf))
	c.Long = `Call the ID service.

Modes: uuid-v4, uuid-v7, snowflake, segment (tag created with create-tag), redis-incr (any tag).`
	cf.register(c, "")
	return c
}

// idCall connects per the flags, bounds the call by --timeout, makes it, and prints the
// response as JSON with --json or with human otherwise.
func idCall[Res proto.Message](cmd *cobra.Command, cf *clientFlags, call func(context.Context, idgenv1connect.IdServiceClient) (Res, error), human func(io.Writer, Res)) error {
	c, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := cf.callContext(cmd.Context(), 0)
	defer cancel()
	r, err := call(ctx, c.IDService())
	if err != nil {
		return err
	}
	if cf.asJSON {
		return printJSON(cmd.OutOrStdout(), r)
	}
	human(cmd.OutOrStdout(), r)
	return nil
}

func newIDNextCmd(cf *clientFlags) *cobra.Command {
	var mode, tag string
	var count uint32
	c := &cobra.Command{
		Use:     "next",
		Short:   "print new IDs, one per line",
		Example: "  coord id next --mode uuid-v7\n  coord id next --mode segment --tag orders --count 100",
		Args:    argsExactly(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := parseMode(mode)
			if err != nil {
				return usageErr(cmd, err)
			}
			return idCall(cmd, cf, func(ctx context.Context, ids idgenv1connect.IdServiceClient) (*idgenv1.NextResponse, error) {
				return ids.Next(ctx, &idgenv1.NextRequest{Mode: m, Tag: tag, Count: count})
			}, func(w io.Writer, r *idgenv1.NextResponse) {
				for _, id := range r.GetIds() {
					fmt.Fprintln(w, id)
				}
			})
		},
	}
	c.Flags().StringVar(&mode, "mode", "snowflake", "uuid-v4, uuid-v7, snowflake, segment or redis-incr")
	c.Flags().StringVar(&tag, "tag", "", "the tag of segment and redis-incr")
	c.Flags().Uint32Var(&count, "count", 1, "how many IDs, 1 to 10000")
	return c
}

func newIDDecodeCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "decode ID",
		Short: "show a snowflake ID's time, worker id and sequence",
		Args:  argsExactly("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return idCall(cmd, cf, func(ctx context.Context, ids idgenv1connect.IdServiceClient) (*idgenv1.DecodeResponse, error) {
				return ids.Decode(ctx, &idgenv1.DecodeRequest{Id: args[0]})
			}, func(w io.Writer, r *idgenv1.DecodeResponse) {
				fmt.Fprintf(w, "snowflake %s\n", args[0])
				fmt.Fprintf(w, "  time       %s\n", r.GetTime().AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00"))
				fmt.Fprintf(w, "  worker id  %d\n", r.GetWorkerId())
				fmt.Fprintf(w, "  sequence   %d\n", r.GetSequence())
			})
		},
	}
}

func newIDTagsCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "tags",
		Short: "list the segment tags and this instance's buffers",
		Args:  argsExactly(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return idCall(cmd, cf, func(ctx context.Context, ids idgenv1connect.IdServiceClient) (*idgenv1.ListTagsResponse, error) {
				return ids.ListTags(ctx, &idgenv1.ListTagsRequest{})
			}, func(w io.Writer, r *idgenv1.ListTagsResponse) { printTags(w, r.GetTags()) })
		},
	}
}

func newIDCreateTagCmd(cf *clientFlags) *cobra.Command {
	var start, step int64
	var description string
	c := &cobra.Command{
		Use:   "create-tag TAG",
		Short: "create a segment tag",
		Args:  argsExactly("TAG"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return idCall(cmd, cf, func(ctx context.Context, ids idgenv1connect.IdServiceClient) (*idgenv1.CreateTagResponse, error) {
				return ids.CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: args[0], Start: start, Step: step, Description: description})
			}, func(w io.Writer, r *idgenv1.CreateTagResponse) {
				t := r.GetTag()
				fmt.Fprintf(w, "created tag %s: first ID %d, step %d\n", t.GetTag(), t.GetMaxId(), t.GetStep())
			})
		},
	}
	c.Flags().Int64Var(&start, "start", 0, "the first ID; 0 means 1, or for a deleted tag where it stopped")
	c.Flags().Int64Var(&step, "step", 1000, "the configured segment size")
	c.Flags().StringVar(&description, "description", "", "a note for operators")
	return c
}

func newIDUpdateTagCmd(cf *clientFlags) *cobra.Command {
	var step int64
	var description string
	c := &cobra.Command{
		Use:   "update-tag TAG [--step N] [--description TEXT]",
		Short: "change a segment tag's step or description",
		Long: `Change a segment tag's configured step (from each instance's next reservation on) or its
description; a flag not given leaves that setting as it is.`,
		Args: argsExactly("TAG"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &idgenv1.UpdateTagRequest{Tag: args[0]}
			if cmd.Flags().Changed("step") {
				req.Step = &step
			}
			if cmd.Flags().Changed("description") {
				req.Description = &description
			}
			if req.Step == nil && req.Description == nil {
				return usageErr(cmd, errors.New("update-tag wants --step or --description"))
			}
			return idCall(cmd, cf, func(ctx context.Context, ids idgenv1connect.IdServiceClient) (*idgenv1.UpdateTagResponse, error) {
				return ids.UpdateTag(ctx, req)
			}, func(w io.Writer, r *idgenv1.UpdateTagResponse) {
				t := r.GetTag()
				fmt.Fprintf(w, "updated tag %s: step %d, description %q\n", t.GetTag(), t.GetStep(), t.GetDescription())
			})
		},
	}
	c.Flags().Int64Var(&step, "step", 0, "the new configured segment size, 1 to 1000000")
	c.Flags().StringVar(&description, "description", "", "the new note for operators; \"\" clears it")
	return c
}

func newIDDeleteTagCmd(cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete-tag TAG",
		Short: "delete a segment tag",
		Args:  argsExactly("TAG"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return idCall(cmd, cf, func(ctx context.Context, ids idgenv1connect.IdServiceClient) (*idgenv1.DeleteTagResponse, error) {
				return ids.DeleteTag(ctx, &idgenv1.DeleteTagRequest{Tag: args[0]})
			}, func(w io.Writer, r *idgenv1.DeleteTagResponse) {
				t := r.GetTag()
				fmt.Fprintf(w, "deleted tag %s (its max id was %d: create-tag without --start continues there, and a start below it is refused)\n", t.GetTag(), t.GetMaxId())
			})
		},
	}
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
