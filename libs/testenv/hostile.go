package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// MaxErrorMessageBytes is the longest error message a service may answer bad input with,
// however large the input: errors quote a short prefix of a bad value, never all of it.
const MaxErrorMessageBytes = 200

// Hostile is one bad request sent as JSON, the way curl or a script would send it.
type Hostile struct {
	// Name names the case.
	Name string
	// Procedure is the RPC's path, as "/coordkit.idgen.v1.IdService/Next".
	Procedure string
	// Body is the request body, sent as is (it may be invalid JSON or invalid UTF-8).
	Body string
	// Code is the Connect code the service must answer with.
	Code connect.Code
	// Field is what the error message must start with, followed by a colon.
	Field string
}

// RunHostile sends every case to the service at url as a Connect unary JSON request, in
// parallel subtests, and fails each whose answer is not its code with a message that starts
// with its field and is at most MaxErrorMessageBytes.
func RunHostile(t *testing.T, url string, cases []Hostile) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			code, msg := PostJSON(t, url, tc.Procedure, tc.Body)
			t.Logf("%s: %s", code, msg)
			if code != tc.Code.String() {
				t.Fatalf("code %q (%q), want %v", code, msg, tc.Code)
			}
			if !strings.HasPrefix(msg, tc.Field+":") {
				t.Fatalf("message %q does not start with the field %q", msg, tc.Field)
			}
			if len(msg) > MaxErrorMessageBytes {
				t.Fatalf("message is %d bytes, want at most %d: %q", len(msg), MaxErrorMessageBytes, msg)
			}
		})
	}
}

// PostJSON sends body to url+procedure as a Connect unary JSON request and returns the
// Connect error's code and message, both "" when the call succeeded.
func PostJSON(t testing.TB, url, procedure, body string) (code, message string) {
	t.Helper()
	res, err := http.Post(url+procedure, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", procedure, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("POST %s: read the answer: %v", procedure, err)
	}
	if res.StatusCode == http.StatusOK {
		return "", ""
	}
	var e struct{ Code, Message string }
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("POST %s: status %d, body %q is no Connect error: %v", procedure, res.StatusCode, raw, err)
	}
	return e.Code, e.Message
}
