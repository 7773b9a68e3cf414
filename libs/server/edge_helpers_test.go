package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/coordkit/coordkit/libs/server"
)

// Procedures of the demo service the edge tests mount.
const (
	demoPath      = "/demo.v1.EdgeService/"
	unaryProc     = demoPath + "Unary"
	sleepProc     = demoPath + "Sleep"
	failProc      = demoPath + "Fail"
	streamProc    = demoPath + "Stream"
	holdProc      = demoPath + "Hold"
	streamPeriod  = 200 * time.Millisecond
	streamReplies = 3
)

// edgeServer serves a demo service through the real bootstrap: Unary answers at once, Sleep
// after sleep, Fail with internal (so that the log shows the request's line), Stream sends
// streamReplies messages streamPeriod apart, Hold one message and then nothing until the
// call ends. It returns the server's address and the logs.
func edgeServer(t *testing.T, cfg server.Config, sleep time.Duration) (srv *server.Server, addr string, stop func() error, logs *lockedBuffer) {
	t.Helper()
	logs = new(lockedBuffer)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv = server.New(cfg)
	opts := srv.HandlerOptions()
	mux := http.NewServeMux()
	mux.Handle(unaryProc, connect.NewUnaryHandler(unaryProc,
		func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return connect.NewResponse(&emptypb.Empty{}), nil
		}, opts...))
	mux.Handle(sleepProc, connect.NewUnaryHandler(sleepProc,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			select {
			case <-time.After(sleep):
				return connect.NewResponse(&emptypb.Empty{}), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, opts...))
	mux.Handle(failProc, connect.NewUnaryHandler(failProc,
		func(context.Context, *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return nil, connect.NewError(connect.CodeInternal, errors.New("demo failure"))
		}, opts...))
	mux.Handle(streamProc, connect.NewServerStreamHandler(streamProc,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty], s *connect.ServerStream[emptypb.Empty]) error {
			for range streamReplies {
				select {
				case <-time.After(streamPeriod):
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := s.Send(&emptypb.Empty{}); err != nil {
					return err
				}
			}
			return nil
		}, opts...))
	mux.Handle(holdProc, connect.NewServerStreamHandler(holdProc,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty], s *connect.ServerStream[emptypb.Empty]) error {
			if err := s.Send(&emptypb.Empty{}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}, opts...))
	srv.Handle(demoPath, mux)
	addr, stop = serveOn(t, srv)
	return srv, addr, stop, logs
}

// serveOn runs srv on a free loopback port until the test ends and returns its address and
// a stop function returning Serve's result.
func serveOn(t *testing.T, srv *server.Server) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	t.Cleanup(func() { stop() }) //nolint:errcheck // tests that care call stop themselves
	return ln.Addr().String(), stop
}

// h2cClient speaks cleartext HTTP/2 with prior knowledge, as gRPC clients do.
func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

// writeFile writes content to a file named name in dir with mode perm and returns its path.
func writeFile(t *testing.T, dir, name, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// getStatus GETs url with client and returns the status code and body.
func getStatus(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	res, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(body))
}
