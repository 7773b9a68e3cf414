package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/config"
	lockv1 "github.com/coordkit/coordkit/proto/gen/coordkit/lock/v1"
)

const lockUsage = `usage:
  coord lock acquire KEY [--ttl 30s] [--wait 0s] [--fair] [--owner SECRET] [flags]
  coord lock release KEY --owner SECRET [--token N] [flags]
  coord lock renew   KEY --owner SECRET [--ttl 30s] [flags]
  coord lock inspect KEY [flags]
  coord lock watch   KEY | --prefix P [flags]   one line per event until interrupted

The CLI holds no watchdog: a lock it acquires lasts for its ttl unless renewed or released.
Common flags: --server URL, --backend NAME, --json, --timeout D.
`

// errNotAcquired makes `coord lock acquire` exit non-zero when the lock stayed taken, so
// scripts can branch on it.
var errNotAcquired = errors.New("not acquired")

func runLock(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, lockUsage)
		return flag.ErrHelp
	}
	verb := args[0]
	fs := flag.NewFlagSet("lock "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = config.Usage(fs, "coord lock "+verb+" KEY [flags]")
	serverURL := fs.String("server", "http://127.0.0.1:8080", "base URL of a coordkit service")
	backend := fs.String("backend", "", "lock backend; empty means the service's default")
	owner := fs.String("owner", "", "owner secret (required for release and renew)")
	ttl := fs.Duration("ttl", 30*time.Second, "lease length")
	token := fs.Uint64("token", 0, "release: the lease's fencing token; the release then fails rather than drop a hold of a newer lease")
	wait := fs.Duration("wait", 0, "acquire: how long to wait for a taken lock")
	fair := fs.Bool("fair", false, "acquire: wait in line, first come first served across instances (with --wait)")
	prefix := fs.String("prefix", "", "watch: every key starting with this, instead of one KEY")
	asJSON := fs.Bool("json", false, "print the response as JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline for the call, on top of --wait")
	positional, err := parsePositional(fs, args[1:])
	if err != nil {
		return err
	}
	if verb == "watch" {
		if len(positional) > 1 || (len(positional) == 1) == (*prefix != "") {
			fs.Usage()
			return errors.New("watch wants one KEY or --prefix P")
		}
		req := &lockv1.WatchRequest{Prefix: *prefix, Backend: *backend}
		if len(positional) == 1 {
			req.Key = positional[0]
		}
		return watchLocks(ctx, client.New(*serverURL), req, *asJSON, stdout)
	}
	if len(positional) != 1 {
		fs.Usage()
		return fmt.Errorf("want exactly one KEY, got %d arguments", len(positional))
	}
	key := positional[0]
	ctx, cancel := context.WithTimeout(ctx, *timeout+*wait)
	defer cancel()
	locks := client.New(*serverURL).Locks()

	var res proto.Message
	switch verb {
	case "acquire":
		r, err := locks.Acquire(ctx, &lockv1.AcquireRequest{
			Key: key, Fair: *fair, Backend: *backend, Owner: *owner, Ttl: durationpb.New(*ttl), Wait: durationpb.New(*wait),
		})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			printAcquire(stdout, r)
		}
	case "release":
		r, err := locks.Release(ctx, &lockv1.ReleaseRequest{Key: key, Backend: *backend, Owner: *owner, FencingToken: *token})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			fmt.Fprintf(stdout, "released %s (%d holds left)\n", key, r.GetHoldCount())
		}
	case "renew":
		r, err := locks.Renew(ctx, &lockv1.RenewRequest{Key: key, Backend: *backend, Owner: *owner, Ttl: durationpb.New(*ttl)})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			fmt.Fprintf(stdout, "renewed %s until %s\n", key, r.GetLease().GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano))
		}
	case "inspect":
		r, err := locks.Inspect(ctx, &lockv1.InspectRequest{Key: key, Backend: *backend})
		if err != nil {
			return err
		}
		res = r
		if !*asJSON {
			printState(stdout, r.GetState())
		}
	default:
		fmt.Fprint(stderr, lockUsage)
		return fmt.Errorf("unknown lock command %q", verb)
	}
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(out))
	}
	if a, ok := res.(*lockv1.AcquireResponse); ok && !a.GetAcquired() {
		return errNotAcquired
	}
	return nil
}

// parseWithKey parses flags placed before or after the single KEY argument.
func parseWithKey(fs *flag.FlagSet, args []string) (string, error) {
	positional, err := parsePositional(fs, args)
	if err != nil {
		return "", err
	}
	if len(positional) != 1 {
		fs.Usage()
		return "", fmt.Errorf("want exactly one KEY, got %d arguments", len(positional))
	}
	return positional[0], nil
}

// parsePositional parses flags placed before, between or after the positional arguments,
// and returns those.
func parsePositional(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := config.Parse(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// watchLocks prints a Watch stream, one line per message, until ctx ends (Ctrl-C: exit 0)
// or the stream fails.
func watchLocks(ctx context.Context, c *client.Client, req *lockv1.WatchRequest, asJSON bool, stdout io.Writer) error {
	for msg, err := range c.Watch(ctx, req) {
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if asJSON {
			out, err := protojson.Marshal(msg)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, string(out))
			continue
		}
		if st := msg.GetState(); st != nil {
			if st.GetHeld() {
				fmt.Fprintf(stdout, "state    %s on %s: held by %s (fencing token %d, expires %s)\n", st.GetKey(), st.GetBackend(),
					st.GetHolderId(), st.GetFencingToken(), st.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano))
			} else {
				fmt.Fprintf(stdout, "state    %s on %s: free\n", st.GetKey(), st.GetBackend())
			}
		}
		if ev := msg.GetEvent(); ev != nil {
			kind := strings.ToLower(strings.TrimPrefix(ev.GetKind().String(), "LOCK_EVENT_KIND_"))
			fmt.Fprintf(stdout, "%-8s %s on %s: holder %s, fencing token %d\n", kind, ev.GetKey(), ev.GetBackend(), ev.GetHolderId(), ev.GetFencingToken())
		}
	}
	return nil
}

func printAcquire(w io.Writer, r *lockv1.AcquireResponse) {
	if !r.GetAcquired() {
		h := r.GetHolder()
		fmt.Fprintf(w, "not acquired: %s on %s is held by %s (fencing token %d, %d holds, expires in %s)\n",
			h.GetKey(), h.GetBackend(), h.GetHolderId(), h.GetFencingToken(), h.GetHoldCount(),
			time.Until(h.GetExpiresAt().AsTime()).Round(time.Millisecond))
		return
	}
	l := r.GetLease()
	fmt.Fprintf(w, "acquired %s on %s\n", l.GetKey(), l.GetBackend())
	fmt.Fprintf(w, "  owner          %s   (keep it: release, renew and re-entry need it)\n", l.GetOwner())
	fmt.Fprintf(w, "  fencing token  %d\n", l.GetFencingToken())
	fmt.Fprintf(w, "  hold count     %d\n", l.GetHoldCount())
	fmt.Fprintf(w, "  expires at     %s\n", l.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano))
}

func printState(w io.Writer, st *lockv1.LockState) {
	if !st.GetHeld() {
		fmt.Fprintf(w, "%s on %s is free\n", st.GetKey(), st.GetBackend())
		return
	}
	fmt.Fprintf(w, "%s on %s is held\n", st.GetKey(), st.GetBackend())
	fmt.Fprintf(w, "  holder id      %s\n", st.GetHolderId())
	fmt.Fprintf(w, "  fencing token  %d\n", st.GetFencingToken())
	fmt.Fprintf(w, "  hold count     %d\n", st.GetHoldCount())
	fmt.Fprintf(w, "  expires at     %s (in %s)\n", st.GetExpiresAt().AsTime().Local().Format(time.RFC3339Nano),
		time.Until(st.GetExpiresAt().AsTime()).Round(time.Millisecond))
}
