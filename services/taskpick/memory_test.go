package taskpick_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/taskpick"
)

// heapPeak runs f and returns the most the Go heap grew above its level before f (after a
// GC), sampled every millisecond, and what f allocated in all. The tests that use it do not
// run in parallel, so the heap is theirs alone: server, client and test.
func heapPeak(f func()) (peak, allocated uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, total := ms.HeapAlloc, ms.TotalAlloc
	var top atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > base && m.HeapAlloc-base > top.Load() {
				top.Store(m.HeapAlloc - base)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	return top.Load(), ms.TotalAlloc - total
}

const mib = 1 << 20

// TestBatchOfLargeGetsIsBounded sends the hostile batch: 1,000 Gets of one 256 KiB task, as
// JSON (about 40 KB), which answered 350 MB and took the server to 1.7 GB. The answer must
// stay within the 4 MiB limit, the Gets that do not fit answer resource_exhausted without
// reading the task, and the process's heap (server and client) must peak far below 100 MB.
func TestBatchOfLargeGetsIsBounded(t *testing.T) {
	in := startInstance(t, "sqlite", sqliteStore(t)(t), nil)
	p := pool(t, "big-gets")
	put(t, in, p, &taskpickv1.NewTask{Id: "big", Payload: make([]byte, taskpick.MaxPayloadBytes)})
	ops := make([]*taskpickv1.BatchOperation, server.MaxBatchOperations)
	for i := range ops {
		ops[i] = getOp(&taskpickv1.GetRequest{Pool: p, Id: "big"})
	}
	js := taskpickv1connect.NewTaskPickServiceClient(http.DefaultClient, in.url, connect.WithProtoJSON())
	var resp *taskpickv1.BatchResponse
	var err error
	peak, allocated := heapPeak(func() { resp, err = js.Batch(context.Background(), &taskpickv1.BatchRequest{Operations: ops}) })
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	ok := 0
	for i, r := range resp.GetResults() {
		switch code := batchCode(t, fmt.Sprint("get ", i), r); code {
		case 0:
			ok++
		case connect.CodeResourceExhausted:
		default:
			t.Fatalf("get %d: %v, want a task or resource_exhausted", i, r.GetError())
		}
	}
	size := answerSize(t, resp)
	t.Logf("1,000 Gets of a 256 KiB task: %d answered, %d refused, answer %.2f MiB; heap peak +%.1f MiB, %.1f MiB allocated",
		ok, len(resp.GetResults())-ok, float64(size)/mib, float64(peak)/mib, float64(allocated)/mib)
	if ok == 0 || size > taskpick.DefaultMaxAnswerBytes || peak > 60*mib || allocated > 200*mib {
		t.Fatalf("answered %d Gets in %d bytes with a heap peak of %d bytes, %d allocated; want some, within %d bytes, under 60 MiB and 200 MiB",
			ok, size, peak, allocated, taskpick.DefaultMaxAnswerBytes)
	}
}

// TestListDeadOfLargeTasksIsBounded lists 1,000 dead tasks of a pool that has 200 of
// 256 KiB: the answer stops at the 4 MiB limit, says truncated, and the heap peaks far below
// 100 MB (the 50 MiB of payloads are never all read).
func TestListDeadOfLargeTasksIsBounded(t *testing.T) {
	b := sqliteStore(t)(t)
	in := startInstance(t, "sqlite", b, nil)
	p := pool(t, "big-dead")
	const n = 200
	tasks := make([]taskpick.NewTask, n)
	for i := range tasks {
		tasks[i] = taskpick.NewTask{ID: fmt.Sprint("dead", i), Payload: make([]byte, taskpick.MaxPayloadBytes), MaxAttempts: 1}
	}
	if _, err := b.Put(ctx, p, tasks); err != nil {
		t.Fatal(err)
	}
	digests := make([]string, taskpick.MaxPickCount)
	for i := range digests {
		digests[i] = taskpick.LeaseDigest(fmt.Sprint(i))
	}
	for dead := 0; dead < n; {
		picked, err := b.Pick(ctx, p, taskpick.PickSpec{N: taskpick.MaxPickCount, TTL: time.Minute, Digests: digests, MaxBytes: 1 << 30})
		if err != nil || len(picked.Tasks) == 0 {
			t.Fatalf("Pick: %d tasks, %v", len(picked.Tasks), err)
		}
		for i, lt := range picked.Tasks {
			if _, err := b.Nack(ctx, p, lt.ID, taskpick.Lease{Token: lt.Token, Digest: digests[i]}, 0, "boom"); err != nil {
				t.Fatal(err)
			}
			dead++
		}
	}
	js := taskpickv1connect.NewTaskPickServiceClient(http.DefaultClient, in.url, connect.WithProtoJSON())
	var resp *taskpickv1.ListDeadResponse
	var err error
	peak, allocated := heapPeak(func() {
		resp, err = js.ListDead(context.Background(), &taskpickv1.ListDeadRequest{Pool: p, Limit: taskpick.MaxListDead})
	})
	if err != nil {
		t.Fatalf("ListDead: %v", err)
	}
	size := answerSize(t, resp)
	t.Logf("ListDead limit 1,000 of %d dead 256 KiB tasks: %d listed, answer %.2f MiB; heap peak +%.1f MiB, %.1f MiB allocated",
		resp.GetTotal(), len(resp.GetTasks()), float64(size)/mib, float64(peak)/mib, float64(allocated)/mib)
	if len(resp.GetTasks()) == 0 || !resp.GetTruncated() || resp.GetTotal() != n || size > taskpick.DefaultMaxAnswerBytes || peak > 60*mib {
		t.Fatalf("ListDead: %d of %d tasks (truncated %v) in %d bytes, heap peak %d; want some of %d, truncated, within %d bytes, under 60 MiB",
			len(resp.GetTasks()), resp.GetTotal(), resp.GetTruncated(), size, peak, n, taskpick.DefaultMaxAnswerBytes)
	}
}
