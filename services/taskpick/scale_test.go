package taskpick_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestTaskGrabAtScale is the classic "A and B grab the same task" scenario at scale: 2 instances ×
// 32 workers pick 10,000 tasks at random. Every task must be acked exactly once and never be
// held by two leases at once: with a 10-minute ttl no lease expires even on a loaded machine, so
// any second pick of a task is a double grab. Under the race detector it grabs 3,000.
func TestTaskGrabAtScale(t *testing.T) {
	t.Parallel()
	const workers = 32
	tasks := 10000
	if testenv.Race {
		tasks = 3000
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			open, bus := b.store(t), embeddedBus(t)
			ins := []*instance{startInstance(t, b.name, open(t), bus), startInstance(t, b.name, open(t), bus)}
			p := pool(t, "scale")
			for start := 0; start < tasks; start += 500 {
				var batch []*taskpickv1.NewTask
				for i := start; i < start+500; i++ {
					batch = append(batch, &taskpickv1.NewTask{Id: strconv.Itoa(i)})
				}
				put(t, ins[start/500%2], p, batch...)
			}
			var mu sync.Mutex
			picks, acks := map[string]int{}, map[string]int{}
			var wg sync.WaitGroup
			began := time.Now()
			for w := range 2 * workers {
				in := ins[w%2]
				wg.Go(func() {
					for {
						got, err := in.client.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Order: taskpickv1.Order_ORDER_RANDOM, Ttl: durationpb.New(10 * time.Minute)})
						if err != nil {
							t.Errorf("Pick: %v", err)
							return
						}
						if len(got.GetTasks()) == 0 {
							return
						}
						lt := got.GetTasks()[0]
						mu.Lock()
						picks[lt.GetId()]++ // a second pick of a task is a double grab
						mu.Unlock()
						if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: lt.GetId(), LeaseToken: lt.GetLeaseToken(), LeaseSecret: lt.GetLeaseSecret()}); err != nil {
							t.Errorf("Ack %s: %v", lt.GetId(), err)
							return
						}
						mu.Lock()
						acks[lt.GetId()]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			took := time.Since(began)
			for i := range tasks {
				id := strconv.Itoa(i)
				if picks[id] != 1 || acks[id] != 1 {
					t.Fatalf("task %s picked %d times, acked %d times", id, picks[id], acks[id])
				}
			}
			t.Logf("%d tasks picked and acked once each by %d workers on 2 instances in %v (%.0f tasks/s)",
				tasks, 2*workers, took.Round(time.Millisecond), float64(tasks)/took.Seconds())
		})
	}
}

// workerEnv makes the test binary a worker process: it picks one task from the pool at the
// URL with a 1s lease, prints its token and hangs until killed.
const workerEnv = "TASKPICK_TEST_WORKER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		url, p, _ := strings.Cut(spec, "|")
		c := taskpickv1connect.NewTaskPickServiceClient(http.DefaultClient, url)
		got, err := c.Pick(ctx, &taskpickv1.PickRequest{Pool: p, Ttl: sec(time.Second), Wait: sec(10 * time.Second)})
		if err != nil || len(got.GetTasks()) != 1 {
			fmt.Println("pick failed:", err)
			os.Exit(1)
		}
		fmt.Println(got.GetTasks()[0].GetLeaseToken())
		select {} // working on it until SIGKILL
	}
	os.Exit(m.Run())
}

// TestWorkerKilledMidTask kills a worker process holding a task: the task is redelivered
// after its lease with a higher token, and the dead worker's token is refused.
func TestWorkerKilledMidTask(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			in, p := one(t, b), pool(t, "killed")
			put(t, in, p, task("job"))
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), workerEnv+"="+in.url+"|"+p)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("worker: %v", err)
			}
			stale, err := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
			if err != nil {
				t.Fatalf("worker said %q", line)
			}
			killedAt := time.Now()
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			got := pick(t, in, &taskpickv1.PickRequest{Pool: p, Wait: sec(20 * time.Second)})
			if len(got) != 1 || got[0].GetLeaseToken() <= stale || got[0].GetAttempt() != 2 {
				t.Fatalf("redelivery %v after the killed worker's token %d", got, stale)
			}
			t.Logf("redelivered %v after the kill (lease 1s)", time.Since(killedAt).Round(time.Millisecond))
			_, err = in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "job", LeaseToken: stale, LeaseSecret: "the killed worker's"})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("the killed worker's Ack: %v, want failed_precondition", err)
			}
			if _, err := in.client.Ack(ctx, &taskpickv1.AckRequest{Pool: p, Id: "job", LeaseToken: got[0].GetLeaseToken(), LeaseSecret: got[0].GetLeaseSecret()}); err != nil {
				t.Fatalf("Ack of the redelivery: %v", err)
			}
		})
	}
}
