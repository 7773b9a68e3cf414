// Command transportceiling measures what the transport alone costs a batched call, without
// Connect, protobuf or any service: closed-loop callers queue 48-byte operations behind a
// coalescer (at most -inflight batches in flight, the rest leave together when one returns),
// and an echo server answers each batch, over
//
//	unary  one HTTP/1.1 POST per batch (what the SDK's Batch RPC is on the wire)
//	fdx    one long HTTP/1.1 request, full duplex, length-prefixed batches both ways
//	h2     one HTTP/2 cleartext stream, same framing (a Connect bidi stream's transport)
//	tcp    a bare TCP connection, same framing: the floor
//
// Client and server share this process, so the CPU per operation is both sides' together.
// It was written to decide whether a long-lived stream from the SDK could bring the lock
// service to redsync's throughput; its results are in docs/benchmarks.md, "Batching: what
// was measured while designing it".
//
//	go run ./tools/bench/experiments/transportceiling -mode unary -clients 16
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const opSize = 48

// frame: u32 len, u32 nops, then nops*opSize bytes; reply same shape.
func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf)
	return buf, err
}

func frame(payload []byte) []byte {
	b := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	copy(b[4:], payload)
	return b
}

type op struct {
	done chan struct{}
}

type coalescer struct {
	mu       sync.Mutex
	queue    []*op
	inflight int
	max      int
	send     func(ops []*op) // must call c.finished(ops) when done
	cond     *sync.Cond
}

func (c *coalescer) do() {
	o := &op{done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, o)
	if c.inflight < c.max {
		c.inflight++
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		c.send(batch)
	} else {
		c.mu.Unlock()
	}
	<-o.done
}

// finished delivers and sends what queued meanwhile.
func (c *coalescer) finished(ops []*op) {
	for _, o := range ops {
		close(o.done)
	}
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.inflight--
		c.mu.Unlock()
		return
	}
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	c.send(batch)
}

func payload(n int) []byte { return make([]byte, n*opSize) }

func main() {
	mode := flag.String("mode", "unary", "unary|fdx|h2|tcp")
	clients := flag.Int("clients", 16, "")
	dur := flag.Duration("d", 3*time.Second, "")
	maxIn := flag.Int("inflight", 1, "")
	flag.Parse()

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/unary", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/proto")
		w.Write(b)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.ProtoMajor == 1 {
			if err := rc.EnableFullDuplex(); err != nil {
				panic(err)
			}
		}
		w.WriteHeader(200)
		rc.Flush()
		br := bufio.NewReader(r.Body)
		var buf []byte
		for {
			p, err := readFrame(br, buf)
			if err != nil {
				return
			}
			buf = p
			w.Write(frame(p))
			rc.Flush()
		}
	})
	srv := &http.Server{Handler: mux}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	if *mode == "h2" {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		srv.Protocols, tr.Protocols = &p, &p
	}
	if *mode == "tcp" {
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					br := bufio.NewReader(conn)
					var buf []byte
					for {
						p, err := readFrame(br, buf)
						if err != nil {
							return
						}
						buf = p
						conn.Write(frame(p))
					}
				}()
			}
		}()
	} else {
		go srv.Serve(ln)
	}

	hc := &http.Client{Transport: tr}
	c := &coalescer{max: *maxIn}
	var batches, opsN atomic.Int64
	switch *mode {
	case "unary":
		c.send = func(ops []*op) {
			go func() {
				body := payload(len(ops))
				resp, err := hc.Post("http://"+addr+"/unary", "application/proto", bytes.NewReader(body))
				if err != nil {
					panic(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				batches.Add(1)
				c.finished(ops)
			}()
		}
	default:
		var w io.Writer
		var r *bufio.Reader
		var wmu sync.Mutex
		if *mode == "tcp" {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				panic(err)
			}
			w, r = conn, bufio.NewReader(conn)
		} else {
			pr, pw := io.Pipe()
			req, _ := http.NewRequest("POST", "http://"+addr+"/stream", pr)
			req.Header.Set("Content-Type", "application/proto")
			respc := make(chan *http.Response)
			go func() {
				resp, err := hc.Do(req)
				if err != nil {
					panic(err)
				}
				respc <- resp
			}()
			w = pw
			// the response headers arrive only after the server's flush; send a first ping
			pw.Write(frame(nil))
			resp := <-respc
			r = bufio.NewReader(resp.Body)
			if _, err := readFrame(r, nil); err != nil {
				panic(err)
			}
			fmt.Println("proto", resp.Proto)
		}
		pending := make(chan []*op, 1024)
		c.send = func(ops []*op) {
			wmu.Lock()
			pending <- ops
			w.Write(frame(payload(len(ops))))
			wmu.Unlock()
		}
		go func() {
			var buf []byte
			for {
				p, err := readFrame(r, buf)
				if err != nil {
					panic(err)
				}
				buf = p
				ops := <-pending
				batches.Add(1)
				c.finished(ops)
			}
		}()
	}
	var ru0, ru1 syscall.Rusage
	var stop atomic.Bool
	var wg sync.WaitGroup
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for range *clients {
		wg.Go(func() {
			for !stop.Load() {
				c.do()
				opsN.Add(1)
			}
		})
	}
	time.Sleep(*dur)
	stop.Store(true)
	wg.Wait()
	el := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
	n := opsN.Load()
	fmt.Printf("%s clients=%d inflight=%d: %.0f ops/s, %.1f ops/batch, %.1f us CPU/op\n", *mode, *clients, *maxIn,
		float64(n)/el.Seconds(), float64(n)/float64(batches.Load()), float64(cpu.Microseconds())/float64(n))
}
