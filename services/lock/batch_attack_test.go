package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordkit/coordkit/libs/client"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1/lockv1connect"
	"github.com/coordkit/coordkit/services/lock"
)

// delayRT delays every request by d before sending it, so that calls made meanwhile queue in
// the SDK's coalescer and leave together.
type delayRT struct {
	base http.RoundTripper
	d    time.Duration
	mu   sync.Mutex
	log  []string // path + " " + X-Tenant of every request
	hang string   // requests whose body contains it hang until their context ends
}

func (rt *delayRT) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.log = append(rt.log, r.URL.Path+" "+r.Header.Get("X-Tenant"))
	rt.mu.Unlock()
	if rt.hang != "" && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(rt.hang)) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
	}
	time.Sleep(rt.d)
	return rt.base.RoundTrip(r)
}

func (rt *delayRT) paths() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]string(nil), rt.log...)
}

// occupy sends two slow calls so that both of the client's sending slots are busy.
func occupy(c *client.Client) {
	for i := range 2 {
		go c.Locks().Inspect(context.Background(), &lockv1.InspectRequest{Key: "occupy" + string(rune('a'+i))})
		time.Sleep(10 * time.Millisecond) // each alone, in a slot of its own
	}
	time.Sleep(50 * time.Millisecond)
}

// TestPoisonedBatch: a caller whose request cannot be marshalled (invalid UTF-8 in a
// proto3 string) fails alone, batched as unary: a Batch that could not be encoded is resent
// one operation at a time, so an innocent TryLock queued with it succeeds.
func TestPoisonedBatch(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	for _, batching := range []int{0, client.DefaultBatching} {
		rt := &delayRT{base: http.DefaultTransport, d: 200 * time.Millisecond}
		c := client.New(inst.url, client.WithHTTPClient(&http.Client{Transport: rt}), client.WithBatching(batching))
		occupy(c)
		var wg sync.WaitGroup
		var goodErr, badErr error
		wg.Go(func() {
			_, goodErr = c.TryLock(context.Background(), "good-"+string(rune('0'+batching)), client.WithTTL(time.Minute))
		})
		wg.Go(func() {
			_, badErr = c.TryLock(context.Background(), "bad\xff", client.WithTTL(time.Minute))
		})
		wg.Wait()
		t.Logf("batching=%d: good: %v; bad: %v; requests %v", batching, goodErr, badErr, rt.paths())
		if goodErr != nil {
			t.Errorf("batching=%d: an innocent TryLock failed because of its neighbour: %v", batching, goodErr)
		}
	}
}

// TestOversizedNeighbour: one caller's request over the server's 1 MiB limit fails alone
// (resource_exhausted), batched as unary: its neighbours queued with it succeed.
func TestOversizedNeighbour(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	for _, batching := range []int{0, client.DefaultBatching} {
		rt := &delayRT{base: http.DefaultTransport, d: 200 * time.Millisecond}
		c := client.New(inst.url, client.WithHTTPClient(&http.Client{Transport: rt}), client.WithBatching(batching))
		occupy(c)
		var wg sync.WaitGroup
		var goodErr, bigErr error
		wg.Go(func() {
			_, goodErr = c.TryLock(context.Background(), "good2-"+string(rune('0'+batching)), client.WithTTL(time.Minute))
		})
		wg.Go(func() {
			_, bigErr = c.Locks().Inspect(context.Background(), &lockv1.InspectRequest{Key: "k", Backend: strings.Repeat("b", 1100_000)})
		})
		wg.Wait()
		t.Logf("batching=%d: good: %v; big: %v; %v", batching, goodErr, bigErr, rt.paths())
		if goodErr != nil {
			t.Errorf("batching=%d: an innocent TryLock failed because of its neighbour: %v", batching, goodErr)
		}
	}
}

// TestHeadOfLineWatchdog: two calls without a deadline hang on a stuck connection (the
// transport never answers them) and so hold both of a batching client's sending slots; the
// watchdog of a healthy lock on the same client must still renew it (its retries go around
// the batching), as it does on an unbatched client.
func TestHeadOfLineWatchdog(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	for _, batching := range []int{0, client.DefaultBatching} {
		rt := &delayRT{base: http.DefaultTransport, hang: "elsewhere"}
		c := client.New(inst.url, client.WithHTTPClient(&http.Client{Transport: rt}), client.WithBatching(batching))
		// A 3s lease renews every second; its retries have two seconds less the margin,
		// room for a loaded machine.
		l, err := c.Lock(context.Background(), "hol-"+string(rune('0'+batching)), client.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		hung, stop := context.WithCancel(context.Background())
		for range 2 {
			go c.Locks().Inspect(hung, &lockv1.InspectRequest{Key: "elsewhere"})
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case <-l.Lost():
			t.Errorf("batching=%d: a healthy lease was lost while two unrelated calls hung: %v", batching, l.Err())
		case <-time.After(7 * time.Second): // several renewals
		}
		stop()
		l.Unlock(context.Background())
	}
}

// TestBatchCarriesNoCallerHeaders: connect's per-call headers (connect.NewClientContext)
// belong to one caller; a Batch carries several callers' operations, so it must carry none
// of their headers (a tenant or credential header of one caller must never travel with
// another's operation). Per-call headers are sent by calls that go out alone; a client whose
// every call needs its own headers turns batching off (WithBatching(0)).
func TestBatchCarriesNoCallerHeaders(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	rt := &delayRT{base: http.DefaultTransport, d: 200 * time.Millisecond}
	c := client.New(inst.url, client.WithHTTPClient(&http.Client{Transport: rt}))
	occupy(c)
	var wg sync.WaitGroup
	for _, tenant := range []string{"alice", "bob", "carol"} {
		wg.Go(func() {
			ctx, ci := connect.NewClientContext(context.Background())
			ci.RequestHeader().Set("X-Tenant", tenant)
			if _, err := c.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: "t-" + tenant}); err != nil {
				t.Errorf("%s: %v", tenant, err)
			}
		})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	batches := 0
	for _, p := range rt.paths() {
		path, tenant, _ := strings.Cut(p, " ")
		if strings.HasSuffix(path, "/Batch") {
			batches++
			if tenant != "" {
				t.Errorf("a Batch carried the X-Tenant header of %s", tenant)
			}
		}
	}
	if batches == 0 {
		t.Fatalf("no Batch was sent: %v", rt.paths())
	}
}

// noBatch is the lock service of a version before Batch.
type noBatch struct{ *lock.Service }

func (noBatch) Batch(context.Context, *lockv1.BatchRequest) (*lockv1.BatchResponse, error) {
	return nil, connect.NewError(connect.CodeUnimplemented, nil)
}

// TestCallInfoRaceFallback: against a service without Batch, the fallback sends queued
// calls at once as unary calls; none may share another caller's CallInfo (connect's
// per-call headers), which several HTTP calls would then write concurrently: -race fails
// this test if they do.
func TestCallInfoRaceFallback(t *testing.T) {
	t.Parallel()
	svc, err := lock.NewService(lock.Config{Backends: map[string]lock.Backend{"sqlite": sqliteStore(t)(t)}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(lockv1connect.NewLockServiceHandler(noBatch{svc}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	rt := &delayRT{base: http.DefaultTransport, d: 100 * time.Millisecond}
	c := client.New(srv.URL, client.WithHTTPClient(&http.Client{Transport: rt}))
	for round := range 3 {
		occupy(c)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				ctx, ci := connect.NewClientContext(context.Background())
				ci.RequestHeader().Set("X-Tenant", string(rune('a'+i)))
				_, err := c.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: "r"})
				if err != nil {
					t.Errorf("round %d: %v", round, err)
				}
				_ = ci.ResponseHeader().Get("Content-Type")
			})
		}
		wg.Wait()
	}
	t.Logf("requests: %v", rt.paths())
}

// TestJSONBatchEdges posts odd JSON batches.
func TestJSONBatchEdges(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	for _, body := range []string{
		`{"operations":[null]}`,
		`{"operations":[{}]}`,
		`{"operations":[{"acquire":null}]}`,
		`{"operations":[{"acquire":{"key":"a"},"inspect":{"key":"b"}}]}`,
		`{"operations":[{"inspect":{"key":"b","bogus":1}}]}`,
		`{"operations":[{"acquire":{"key":"a","wait":"-1s"}}]}`,
		`{"operations":[{"acquire":{"key":"","wait":"1s"}}]}`,
		`{"operations":null}`,
		`{"operations":[{"release":{"key":"a","owner":"0123456789abcdef0","fencingToken":"-1"}}]}`,
	} {
		res, err := http.Post(inst.url+"/coordkit.lock.v1.LockService/Batch", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Logf("%s\n  -> %d %s", body, res.StatusCode, b)
	}
	// The unary answers, for comparison.
	for _, body := range []string{`{"key":"a","wait":"-1s"}`, `{"key":"","wait":"1s"}`} {
		res, err := http.Post(inst.url+"/coordkit.lock.v1.LockService/Acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Logf("unary %s\n  -> %d %s", body, res.StatusCode, b)
	}
}

var _ = durationpb.New

// TestTimeoutCause: a call whose context has a deadline with a cause of its own
// (context.WithTimeoutCause) and runs out answers deadline_exceeded, batched as unary.
func TestTimeoutCause(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	for _, batching := range []int{0, client.DefaultBatching} {
		rt := &delayRT{base: http.DefaultTransport, d: 300 * time.Millisecond}
		c := client.New(inst.url, client.WithHTTPClient(&http.Client{Transport: rt}), client.WithBatching(batching))
		ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errors.New("request budget spent"))
		_, err := c.TryLock(ctx, "cause")
		cancel()
		t.Logf("batching=%d: %v (code %v, errors.Is DeadlineExceeded %v)", batching, err, connect.CodeOf(err), errors.Is(err, context.DeadlineExceeded))
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("batching=%d: code %v, want deadline_exceeded", batching, connect.CodeOf(err))
		}
	}
}

// TestSDKBatchedEqualsUnary: every SDK lock call answers the same through a batching client
// as through an unbatched one, against a service with Batch and one without.
func TestSDKBatchedEqualsUnary(t *testing.T) {
	t.Parallel()
	svc, err := lock.NewService(lock.Config{Backends: map[string]lock.Backend{"sqlite": sqliteStore(t)(t)}})
	if err != nil {
		t.Fatal(err)
	}
	inst := serveLock(t, lock.Config{Backends: map[string]lock.Backend{"sqlite": sqliteStore(t)(t)}})
	mux := http.NewServeMux()
	mux.Handle(lockv1connect.NewLockServiceHandler(noBatch{svc}))
	old := httptest.NewServer(mux)
	defer old.Close()
	for _, url := range []string{inst.url, old.URL} {
		rt := &delayRT{base: http.DefaultTransport, d: 150 * time.Millisecond}
		c := client.New(url, client.WithHTTPClient(&http.Client{Transport: rt}))
		held, err := c.TryLock(context.Background(), "eq-held", client.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		occupy(c)
		ctx := context.Background()
		const owner = "0123456789abcdef-other"
		checks := []func() error{
			func() error {
				l, err := c.TryLock(ctx, "eq-a", client.WithTTL(time.Minute))
				if err != nil || l.Key() != "eq-a" {
					return fmt.Errorf("TryLock eq-a: %v %v", l, err)
				}
				return nil
			},
			func() error {
				l, err := c.TryLock(ctx, "eq-b", client.WithTTL(time.Minute))
				if err != nil || l.Key() != "eq-b" {
					return fmt.Errorf("TryLock eq-b: %v %v", l, err)
				}
				return nil
			},
			func() error {
				_, err := c.Locks().Release(ctx, &lockv1.ReleaseRequest{Key: "eq-held", Owner: owner})
				if connect.CodeOf(err) != connect.CodePermissionDenied {
					return fmt.Errorf("release by another owner: %v", err)
				}
				return nil
			},
			func() error {
				_, err := c.Locks().Renew(ctx, &lockv1.RenewRequest{Key: "eq-free", Owner: owner})
				if connect.CodeOf(err) != connect.CodeFailedPrecondition {
					return fmt.Errorf("renew not held: %v", err)
				}
				return nil
			},
			func() error {
				res, err := c.Locks().Inspect(ctx, &lockv1.InspectRequest{Key: "eq-held"})
				if err != nil || res.GetState().GetKey() != "eq-held" || !res.GetState().GetHeld() {
					return fmt.Errorf("inspect: %v %v", res, err)
				}
				return nil
			},
			func() error {
				_, err := c.Lock(ctx, "eq-held", client.WithTTL(time.Minute), client.WithWait(300*time.Millisecond))
				if !errors.Is(err, client.ErrNotAcquired) {
					return fmt.Errorf("Lock with a wait on a held lock: %v", err)
				}
				return nil
			},
			func() error {
				qctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(20*time.Millisecond, cancel)
				_, err := c.Locks().Inspect(qctx, &lockv1.InspectRequest{Key: "eq-held"})
				if connect.CodeOf(err) != connect.CodeCanceled {
					return fmt.Errorf("canceled while queued: %v", err)
				}
				return nil
			},
		}
		var wg sync.WaitGroup
		for _, check := range checks {
			wg.Go(func() {
				if err := check(); err != nil {
					t.Errorf("%s: %v", url, err)
				}
			})
		}
		wg.Wait()
		t.Logf("%s: %v", url, rt.paths())
		held.Unlock(ctx)
	}
}

// liar answers every Batch with inspect results only, or one result short.
type liar struct {
	lockv1connect.UnimplementedLockServiceHandler
	short bool
}

func (l liar) Inspect(context.Context, *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	time.Sleep(150 * time.Millisecond)
	return &lockv1.InspectResponse{State: &lockv1.LockState{}}, nil
}

func (l liar) Batch(_ context.Context, req *lockv1.BatchRequest) (*lockv1.BatchResponse, error) {
	n := len(req.GetOperations())
	if l.short {
		n--
	}
	res := &lockv1.BatchResponse{}
	for range n {
		res.Results = append(res.Results, &lockv1.BatchResult{Result: &lockv1.BatchResult_Inspect{Inspect: &lockv1.InspectResponse{}}})
	}
	return res, nil
}

// TestLyingService: wrong kinds and a short answer are internal errors, never a nil answer.
func TestLyingService(t *testing.T) {
	t.Parallel()
	for _, short := range []bool{false, true} {
		mux := http.NewServeMux()
		mux.Handle(lockv1connect.NewLockServiceHandler(liar{short: short}))
		srv := httptest.NewServer(mux)
		c := client.New(srv.URL)
		occupy(c)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				res, err := c.Locks().Acquire(context.Background(), &lockv1.AcquireRequest{Key: fmt.Sprint("k", i)})
				if connect.CodeOf(err) != connect.CodeInternal {
					t.Errorf("short=%v: Acquire answered %v, %v; want internal", short, res, err)
				}
			})
		}
		wg.Wait()
		srv.Close()
	}
}
