package server_test

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/server"
)

// slowBody opens a connection and sends a request's headers announcing a body that never
// comes. It returns the connection.
func slowBody(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", unaryProc, addr)
	return c
}

// closedWithin waits until the server ends c (it answers and closes, or just closes) and
// says whether that happened within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d)) //nolint:errcheck // a failed deadline fails the read
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !(errorsAs(err, &ne) && ne.Timeout())
}

func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

func TestSlowBodies(t *testing.T) {
	t.Parallel()
	const (
		bodyTimeout = time.Second
		conns       = 300
		longWait    = 3 * bodyTimeout // a server-side wait longer than the body timeout
	)
	_, addr, _, _ := edgeServer(t, server.Config{BodyTimeout: bodyTimeout}, longWait)
	base := "http://" + addr

	slow := make([]net.Conn, conns)
	for i := range slow {
		slow[i] = slowBody(t, addr)
		defer slow[i].Close()
	}
	// Meanwhile the service answers, on both protocols, and long waits and streams outlive
	// the body timeout.
	var wg sync.WaitGroup
	results := make(chan string, 8)
	wg.Go(func() {
		if code := call(t, http.DefaultClient, base, sleepProc, ""); code != 0 {
			results <- fmt.Sprintf("%v-long wait over HTTP/1.1 = %v, want ok", longWait, code)
		}
	})
	wg.Go(func() {
		if code := call(t, h2cClient(), base, sleepProc, ""); code != 0 {
			results <- fmt.Sprintf("%v-long wait over h2c = %v, want ok", longWait, code)
		}
	})
	wg.Go(func() {
		if n, code := stream(t, h2cClient(), base, "", connect.WithGRPC()); code != 0 || n != streamReplies {
			results <- fmt.Sprintf("gRPC stream = %d messages, %v; want %d, ok", n, code, streamReplies)
		}
	})
	if code := call(t, http.DefaultClient, base, unaryProc, ""); code != 0 {
		t.Errorf("unary call with %d slow bodies pending = %v, want ok", conns, code)
	}
	start := time.Now()
	for i, c := range slow {
		if !closedWithin(c, bodyTimeout+5*time.Second-time.Since(start)) {
			t.Fatalf("slow connection %d still open %v after its headers; body timeout %v", i, time.Since(start), bodyTimeout)
		}
	}
	t.Logf("%d slow-body connections closed within %v (body timeout %v)", conns, time.Since(start).Round(time.Millisecond), bodyTimeout)
	wg.Wait()
	close(results)
	for r := range results {
		t.Error(r)
	}
}

// TestShutdownCutsSlowBodies checks that shutdown does not wait out the body timeout of
// requests whose body never came: they have not started, so nothing is lost.
func TestShutdownCutsSlowBodies(t *testing.T) {
	t.Parallel()
	_, addr, stop, _ := edgeServer(t, server.Config{BodyTimeout: time.Minute, ShutdownTimeout: 30 * time.Second}, 0)
	for range 50 {
		defer slowBody(t, addr).Close()
	}
	time.Sleep(100 * time.Millisecond) // the handlers are reading the bodies
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Serve after shutdown = %v, want nil", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown with slow bodies pending took %v, want well under the body timeout (1m)", d)
	}
}

func TestMaxConns(t *testing.T) {
	t.Parallel()
	const limit = 8
	_, addr, _, _ := edgeServer(t, server.Config{BodyTimeout: 2 * time.Second, MaxConns: limit}, 0)
	// Every body deadline starts after this instant, so no slot can free before start+2s.
	start := time.Now()
	conns := make([]net.Conn, limit)
	for i := range conns {
		conns[i] = slowBody(t, addr)
		defer conns[i].Close()
	}
	// Every slot is taken: a new request waits until a slow body is cut, not longer.
	if code := call(t, http.DefaultClient, "http://"+addr, unaryProc, ""); code != 0 {
		t.Fatalf("call past the connection limit = %v, want ok once a slot frees", code)
	}
	if d := time.Since(start); d < 2*time.Second || d > 15*time.Second {
		t.Fatalf("call past the limit of %d connections took %v; want it to wait for the 2s body timeout", limit, d)
	}
}

// gzipBomb is a gzip stream of chunks MiB of zeros, about 1 KiB per MiB. Compressing a
// GiB under the race detector takes minutes, so it is assembled: once the compressor's
// window is full of zeros, every further MiB of zeros compresses to the same bytes after a
// flush; the stream repeats those.
func gzipBomb(t *testing.T, chunks int) []byte {
	t.Helper()
	var buf bytes.Buffer
	fw, _ := flate.NewWriter(&buf, flate.BestCompression)
	zeros := make([]byte, 1<<20)
	next := func() []byte {
		buf.Reset()
		fw.Write(zeros) //nolint:errcheck // a bytes.Buffer
		fw.Flush()      //nolint:errcheck // a bytes.Buffer
		return slices.Clone(buf.Bytes())
	}
	first, second, steady := next(), next(), next()
	if !bytes.Equal(steady, next()) {
		t.Fatal("compressed MiB of zeros differ: cannot assemble the bomb")
	}
	buf.Reset()
	fw.Close() //nolint:errcheck // a bytes.Buffer
	final := slices.Clone(buf.Bytes())

	out := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff} // gzip header: deflate, no name
	out = append(append(out, first...), second...)
	var crc uint32
	crc = crc32.Update(crc, crc32.IEEETable, zeros)
	crc = crc32.Update(crc, crc32.IEEETable, zeros)
	for range chunks - 2 {
		out = append(out, steady...)
		crc = crc32.Update(crc, crc32.IEEETable, zeros)
	}
	out = append(out, final...)
	out = binary.LittleEndian.AppendUint32(out, crc)
	return binary.LittleEndian.AppendUint32(out, uint32(chunks<<20))
}

func TestGzipBombIsValid(t *testing.T) {
	t.Parallel()
	zr, err := gzip.NewReader(bytes.NewReader(gzipBomb(t, 5)))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil || len(out) != 5<<20 || bytes.ContainsFunc(out, func(r rune) bool { return r != 0 }) {
		t.Fatalf("assembled bomb inflates to %d bytes (%v), want 5 MiB of zeros", len(out), err)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// connectCode is the Connect code in the body of a failed Connect unary response.
func connectCode(res *http.Response) string {
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return string(body)
}

// TestCompressionBomb measures the process's CPU time, so it does not run in parallel.
func TestCompressionBomb(t *testing.T) {
	const (
		inflated = 1 << 30 // 1 GiB of zeros...
		calls    = 10
	)
	bomb := gzipBomb(t, inflated>>20) // ...in about 1 MiB
	_, addr, _, _ := edgeServer(t, server.Config{MaxRequestBytes: 2 << 20}, 0)
	t.Logf("bomb: %d bytes inflating to %d", len(bomb), inflated)

	post := func(contentType string, body []byte, header map[string]string, client *http.Client) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+unaryProc, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The gRPC envelope: flag 1 (compressed), then the length.
	envelope := make([]byte, 5, 5+len(bomb))
	envelope[0] = 1
	binary.BigEndian.PutUint32(envelope[1:], uint32(len(bomb)))
	envelope = append(envelope, bomb...)

	protocols := []struct {
		name string
		send func() (code string)
	}{
		{name: "connect unary", send: func() string {
			res := post("application/proto", bomb, map[string]string{"Content-Encoding": "gzip"}, http.DefaultClient)
			return connectCode(res)
		}},
		{name: "grpc", send: func() string {
			res := post("application/grpc", envelope, map[string]string{"Grpc-Encoding": "gzip", "Te": "trailers"}, h2cClient())
			io.Copy(io.Discard, res.Body) //nolint:errcheck // for the trailers
			res.Body.Close()
			return res.Trailer.Get("Grpc-Status") + " " + res.Trailer.Get("Grpc-Message")
		}},
	}
	// What inflating the bomb costs here, under this build's instrumentation and this
	// host's load: the yardstick for refusing it (an eighth of it measured, which is enough).
	before := cpuTime(t)
	zr, err := gzip.NewReader(bytes.NewReader(bomb))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, zr, inflated/8); err != nil {
		t.Fatal(err)
	}
	inflate := 8 * (cpuTime(t) - before)
	t.Logf("inflating the bomb in the test: %v CPU", inflate)

	for _, p := range protocols {
		p.send() // warm up: connections, pools
		before, start := cpuTime(t), time.Now()
		var last string
		for range calls {
			last = p.send()
		}
		cpu, wall := cpuTime(t)-before, time.Since(start)
		t.Logf("%s: %d bombs refused in %v wall, %v CPU (all test goroutines): %s", p.name, calls, wall, cpu, last)
		if !strings.Contains(last, "resource_exhausted") && !strings.HasPrefix(last, "8 ") {
			t.Errorf("%s bomb answered %q, want resource_exhausted", p.name, last)
		}
		// Inflating 1 GiB costs 0.4 s of CPU (more under the race detector); refusing one,
		// sending and reading its 1 MiB included, a few ms (50 under the race detector).
		if perCall := cpu / calls; perCall > inflate/4 {
			t.Errorf("%s: a bomb cost %v of CPU, want far less than inflating it (%v)", p.name, perCall, inflate)
		}
	}
}

func TestCompressedBodyCap(t *testing.T) {
	t.Parallel()
	_, addr, _, _ := edgeServer(t, server.Config{MaxRequestBytes: 64 << 10}, 0)
	noise := make([]byte, 1<<20) // incompressible: the gzip body is bigger than the cap
	rand.Read(noise)             //nolint:errcheck // never fails
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(noise) //nolint:errcheck // a bytes.Buffer
	zw.Close()      //nolint:errcheck // a bytes.Buffer
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+unaryProc, &buf)
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Content-Encoding", "gzip")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := connectCode(res); !strings.Contains(body, "resource_exhausted") {
		t.Fatalf("1 MiB compressed body over a 64 KiB cap = %d %s, want resource_exhausted", res.StatusCode, body)
	}
	// The same with no Content-Length (chunked): the cap is on the bytes read.
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriter(pw)
		w.Write(noise) //nolint:errcheck // the server may stop reading
		w.Flush()      //nolint:errcheck // the server may stop reading
		pw.Close()
	}()
	req, _ = http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+unaryProc, pr)
	req.Header.Set("Content-Type", "application/proto")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := connectCode(res); !strings.Contains(body, "resource_exhausted") {
		t.Fatalf("1 MiB chunked body over a 64 KiB cap = %d %s, want resource_exhausted", res.StatusCode, body)
	}
}
