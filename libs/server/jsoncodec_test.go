package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
)

// Procedures of the codec tests: each accepts one real request type of the services and
// answers it empty, so whatever fails, fails in decoding.
const (
	codecNext    = "/codec.v1.Codec/Next"
	codecAcquire = "/codec.v1.Codec/Acquire"
	codecPut     = "/codec.v1.Codec/Put"
	codecWatch   = "/codec.v1.Codec/Watch"
)

// accept is a unary handler of a request type T that answers with an empty T.
func accept[T any, PT interface {
	*T
	proto.Message
}](proc string, opts []connect.HandlerOption) (string, http.Handler) {
	return proc, connect.NewUnaryHandler(proc, func(_ context.Context, req *connect.Request[T]) (*connect.Response[T], error) {
		return connect.NewResponse(new(T)), nil
	}, opts...)
}

// codecServer serves the codec procedures through the real bootstrap.
func codecServer(t *testing.T) (url string, srv *server.Server) {
	t.Helper()
	srv = server.New(server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	opts := srv.HandlerOptions()
	mux := http.NewServeMux()
	mux.Handle(accept[idgenv1.NextRequest](codecNext, opts))
	mux.Handle(accept[lockv1.AcquireRequest](codecAcquire, opts))
	mux.Handle(accept[taskpickv1.PutRequest](codecPut, opts))
	mux.Handle(codecWatch, connect.NewServerStreamHandler(codecWatch,
		func(context.Context, *connect.Request[lockv1.WatchRequest], *connect.ServerStream[lockv1.WatchResponse]) error {
			return nil
		}, opts...))
	srv.Handle("/codec.v1.Codec/", mux)
	url, _ = testenv.Serve(t, srv)
	return url, srv
}

// postJSON sends body to proc as a Connect unary JSON request and returns the HTTP status and
// the Connect error's code and message ("" when it succeeded).
func postJSON(t *testing.T, url, proc, body string) (status int, code, msg string) {
	t.Helper()
	res, err := http.Post(url+proc, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Code, Message string }
	if res.StatusCode != http.StatusOK {
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("error body %q is not a Connect error: %v", raw, err)
		}
	}
	return res.StatusCode, e.Code, e.Message
}

// TestJSONDecodeErrors sends hostile and mistaken JSON bodies: each must be answered
// invalid_argument with a message that starts with the field (or "request body"), says what
// it wants, and stays short however large the input.
func TestJSONDecodeErrors(t *testing.T) {
	t.Parallel()
	url, _ := codecServer(t)
	huge := strings.Repeat("x", 1<<20-100)
	tests := []struct {
		name, proc, body string
		field            string // the message must start with field + ": "
		contains         string
	}{
		{"duration in minutes", codecAcquire, `{"key":"k","ttl":"1m"}`, "ttl", `"60s" or "1.5s"`},
		{"duration as a number", codecAcquire, `{"wait":30}`, "wait", `"s" suffix`},
		{"enum name unknown", codecNext, `{"mode":"MODE_BOGUS","count":1}`, "mode", "MODE_UUID_V4"},
		{"enum name lowercase", codecNext, `{"mode":"snowflake"}`, "mode", `"snowflake"`},
		{"count not a number", codecNext, `{"count":"x"}`, "count", "0 to 4294967295"},
		{"count negative", codecNext, `{"count":-1}`, "count", "0 to 4294967295"},
		{"count fractional", codecNext, `{"count":1.5}`, "count", "integer"},
		{"unknown field", codecNext, `{"mode":"MODE_UUID_V4","cout":5}`, "cout", "unknown field"},
		{"unknown huge field", codecNext, `{"` + huge + `":1}`, `"xxxx`, "unknown field"},
		{"tag not a string", codecNext, `{"tag":12}`, "tag", "string"},
		{"tag invalid UTF-8", codecNext, "{\"tag\":\"a\xff\xfeb\"}", "tag", "UTF-8"},
		{"huge bad value", codecNext, `{"count":"` + huge + `"}`, "count", "bytes)"},
		{"bool as string", codecAcquire, `{"fair":"yes"}`, "fair", "true or false"},
		{"field twice", codecNext, `{"count":1,"count":2}`, "count", "twice"},
		{"proto and JSON name of one field", codecPut, `{"pool":"p","tasks":[{"id":"a","maxAttempts":1,"max_attempts":2}]}`, "tasks[0].max_attempts", "twice"},
		{"nested timestamp", codecPut, `{"pool":"p","tasks":[{"id":"a"},{"id":"b","run_at":"tomorrow"}]}`, "tasks[1].run_at", "RFC 3339"},
		{"nested unknown field", codecPut, `{"tasks":[{"id":"a","colour":1}]}`, "tasks[0].colour", "unknown field"},
		{"list not an array", codecPut, `{"tasks":{"id":"a"}}`, "tasks", "array"},
		{"payload not base64", codecPut, `{"tasks":[{"id":"a","payload":"!!"}]}`, "tasks[0].payload", "base64"},
		{"not an object", codecNext, `[1,2]`, "request body", "object"},
		{"null", codecNext, `null`, "request body", "object"},
		{"truncated", codecNext, `{"count":1`, "request body", "JSON"},
		{"trailing garbage", codecNext, `{"count":1} x`, "request body", ""},
		{"empty body", codecNext, ``, "request body", "{}"},
		{"streaming handler", codecWatch, `{"key":"k","colour":1}`, "colour", "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			proc := tt.proc
			body := tt.body
			var status int
			var code, msg string
			if proc == codecWatch {
				status, code, msg = postStream(t, url, proc, body)
			} else {
				status, code, msg = postJSON(t, url, proc, body)
			}
			t.Logf("%s", msg)
			if code != "invalid_argument" {
				t.Fatalf("status %d, code %q (%q), want invalid_argument", status, code, msg)
			}
			if !strings.HasPrefix(msg, tt.field+": ") && !(strings.HasPrefix(tt.field, `"`) && strings.HasPrefix(msg, tt.field)) {
				t.Fatalf("message %q does not start with the field %q", msg, tt.field)
			}
			if !strings.Contains(msg, tt.contains) {
				t.Fatalf("message %q does not say %q", msg, tt.contains)
			}
			if len(msg) > 220 {
				t.Fatalf("message is %d bytes, want at most 220: %q", len(msg), msg)
			}
		})
	}
}

// TestJSONDecodeAccepts pins what stays valid: both field name spellings, enum numbers and
// names, int64 as strings, durations in seconds.
func TestJSONDecodeAccepts(t *testing.T) {
	t.Parallel()
	url, _ := codecServer(t)
	for _, tc := range []struct{ proc, body string }{
		{codecNext, `{"mode":"MODE_SNOWFLAKE","count":"10"}`},
		{codecNext, `{"mode":3,"count":10}`},
		{codecNext, `{"mode":99}`}, // open enum: the service's validation names it
		{codecAcquire, `{"key":"k","ttl":"1.5s","wait":"60s","fair":true}`},
		{codecPut, `{"pool":"p","tasks":[{"id":"a","maxAttempts":3,"run_at":"2026-01-02T15:04:05Z"}]}`},
		{codecNext, `{}`},
	} {
		if status, code, msg := postJSON(t, url, tc.proc, tc.body); status != http.StatusOK {
			t.Errorf("%s %s: status %d %s %q, want 200", tc.proc, tc.body, status, code, msg)
		}
	}
}

// TestJSONDecodeErrorCounted pins that a body that does not decode reaches the metrics as
// invalid_argument, like any other bad input.
func TestJSONDecodeErrorCounted(t *testing.T) {
	t.Parallel()
	url, _ := codecServer(t)
	postJSON(t, url, codecNext, `{"mode":"MODE_BOGUS"}`)
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	want := `coordkit_rpc_requests_total{code="invalid_argument",procedure="` + codecNext + `"} 1`
	if !strings.Contains(string(body), want) {
		t.Fatalf("metrics lack %q", want)
	}
}

// TestBinaryMarkerIgnored pins that a binary request carrying the field number the JSON codec
// uses internally is not taken for a failed decode.
func TestBinaryMarkerIgnored(t *testing.T) {
	t.Parallel()
	url, _ := codecServer(t)
	// field 536870911, wire type 2 (bytes), "boom": the tag varint of (536870911<<3 | 2).
	body := append([]byte{0xfa, 0xff, 0xff, 0xff, 0x0f, 4}, "boom"...)
	res, err := http.Post(url+codecNext, "application/proto", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d (%s), want 200", res.StatusCode, raw)
	}
}

// postStream sends body to a server-streaming proc over the Connect protocol (one enveloped
// JSON message) and returns the end-of-stream error.
func postStream(t *testing.T, url, proc, body string) (int, string, string) {
	t.Helper()
	env := make([]byte, 5, 5+len(body))
	n := len(body)
	env[1], env[2], env[3], env[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	env = append(env, body...)
	res, err := http.Post(url+proc, "application/connect+json", strings.NewReader(string(env)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	for len(raw) >= 5 {
		flags, size := raw[0], int(raw[1])<<24|int(raw[2])<<16|int(raw[3])<<8|int(raw[4])
		if len(raw) < 5+size {
			break
		}
		msg := raw[5 : 5+size]
		raw = raw[5+size:]
		if flags&2 == 0 {
			continue
		}
		var end struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(msg, &end); err != nil {
			t.Fatalf("end of stream %q: %v", msg, err)
		}
		return res.StatusCode, end.Error.Code, end.Error.Message
	}
	t.Fatalf("no end-of-stream message in the response")
	return 0, "", ""
}
