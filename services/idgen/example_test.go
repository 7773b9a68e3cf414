package idgen_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/coordkit/coordkit/libs/client"
	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1/idgenv1connect"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/services/idgen/idgenservice"
)

// startExampleService runs the ID service on an embedded SQLite store, as `coord serve` does
// with no flags, and returns its URL and a stop function. Examples take no *testing.T, so
// this is startInstance by hand.
func startExampleService() (string, func()) {
	dir, err := os.MkdirTemp("", "coordkit-example")
	if err != nil {
		panic(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := server.New(server.Config{Logger: logger})
	svc, closeSvc, err := idgenservice.OpenService(context.Background(), service.Deps{DataDir: dir, Logger: logger}, idgenservice.Config{})
	if err != nil {
		panic(err)
	}
	srv.Handle(idgenv1connect.NewIdServiceHandler(svc, srv.HandlerOptions()...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	return "http://" + ln.Addr().String(), func() {
		cancel()
		<-done
		closeSvc()
		os.RemoveAll(dir)
	}
}

// The Go SDK's IDs (libs/client): an order service numbers its orders from a segment tag.
// Next serves them from a block the SDK fetched ahead: one call to the service per block,
// not per order.
func Example_clientIDs() {
	url, stop := startExampleService()
	defer stop()
	ctx := context.Background()
	c := client.New(url)
	// Tags are created once, by an operator or at deploy time (coord id create-tag orders).
	if _, err := c.IDService().CreateTag(ctx, &idgenv1.CreateTagRequest{Tag: "orders", Start: 1000}); err != nil {
		panic(err)
	}

	ids := c.IDs() // one value for the whole process; safe for concurrent use
	for range 3 {
		id, err := ids.Next(ctx, idgenv1.Mode_MODE_SEGMENT, "orders")
		if err != nil {
			panic(err) // the service's Connect error, once the buffered IDs are used up
		}
		fmt.Println("order", id)
	}
	batch, err := ids.NextN(ctx, idgenv1.Mode_MODE_SEGMENT, "orders", 2)
	if err != nil {
		panic(err)
	}
	fmt.Println("lines", batch)
	// Output:
	// order 1000
	// order 1001
	// order 1002
	// lines [1003 1004]
}
