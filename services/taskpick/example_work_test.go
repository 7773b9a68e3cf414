package taskpick_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/coordkit/coordkit/libs/client"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/services/taskpick"
	"github.com/coordkit/coordkit/services/taskpick/sqltask"
)

// Two workers, A and B, work one pool of three tasks, both picking at random, so they go for
// the same tasks: each task is still done exactly once, by whichever worker's Pick leased it.
func Example_twoWorkers() {
	url, stop := exampleTaskServer()
	defer stop()
	c := client.New(url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	_, err := c.Tasks().Put(ctx, &taskpickv1.PutRequest{Pool: "emails", Tasks: []*taskpickv1.NewTask{
		{Id: "welcome:ada", Payload: []byte("Hello Ada")},
		{Id: "welcome:bob", Payload: []byte("Hello Bob")},
		{Id: "welcome:cy", Payload: []byte("Hello Cy")},
	}})
	if err != nil {
		fmt.Println("put:", err)
		return
	}

	var mu sync.Mutex
	done := map[string][]string{} // task id -> the workers that did it
	worker := func(name string) func(context.Context, *client.Task) error {
		return func(ctx context.Context, t *client.Task) error {
			// Send the email here, passing t.LeaseToken along as the fencing token.
			mu.Lock()
			defer mu.Unlock()
			done[t.ID] = append(done[t.ID], name)
			if len(done) == 3 {
				cancel() // all sent; Work acks this last one as it stops
			}
			return nil
		}
	}
	var wg sync.WaitGroup
	for _, name := range []string{"A", "B"} {
		wg.Go(func() {
			if err := c.Work(ctx, "emails", worker(name), client.WithOrder(taskpickv1.Order_ORDER_RANDOM)); err != nil {
				fmt.Println("work:", err)
			}
		})
	}
	wg.Wait()

	for _, id := range slices.Sorted(maps.Keys(done)) {
		fmt.Printf("%s done %d time(s)\n", id, len(done[id]))
	}
	// Output:
	// welcome:ada done 1 time(s)
	// welcome:bob done 1 time(s)
	// welcome:cy done 1 time(s)
}

// exampleTaskServer serves a task service on the embedded SQLite store in a temporary
// directory, and returns its URL and the function that stops it and removes the directory.
func exampleTaskServer() (string, func()) {
	dir, err := os.MkdirTemp("", "taskpick-example-")
	if err != nil {
		panic(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	store, err := sqltask.OpenSQLite(context.Background(), filepath.Join(dir, "tasks.db"), sqltask.Config{})
	if err != nil {
		panic(err)
	}
	svc, err := taskpick.NewService(taskpick.Config{Backends: map[string]taskpick.Backend{"sqlite": store}, Logger: quiet})
	if err != nil {
		panic(err)
	}
	srv := server.New(server.Config{Logger: quiet})
	srv.Handle(taskpickv1connect.NewTaskPickServiceHandler(svc, srv.HandlerOptions()...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), func() {
		cancel()
		<-served
		svc.Close()
		store.Close()
		os.RemoveAll(dir)
	}
}
