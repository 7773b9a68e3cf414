package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// maxOneWriteBody is the largest request body oneWrite copies: net/http writes a request
// through a 4 KiB buffer, so headers and a larger body take two writes whatever the body's
// type, and copying it would buy nothing.
const maxOneWriteBody = 4<<10 - 512

// oneWrite is a RoundTripper that sends a small request body of known length in the same
// TCP write as the request's headers. net/http flushes the headers in a write of their own
// before copying any body whose type it does not know to be in memory (golang/go#22088), and
// Connect's unary request body is such a type: that costs every call a second write system
// call, and often a second wake-up of the server, which reads the headers and then waits for
// the body. Giving the transport the body as a *bytes.Reader, which it knows, lets it buffer
// both and write once. Only cleartext http:// requests are changed: over TLS the HTTP/2
// transport writes headers and body as frames of their own anyway, and a full-duplex HTTP/2
// body may not be readable before the response starts.
type oneWrite struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (o oneWrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Body == nil || req.Body == http.NoBody ||
		req.ContentLength <= 0 || req.ContentLength > maxOneWriteBody {
		return o.base.RoundTrip(req)
	}
	// One byte more than announced, to fail a body longer than its length as net/http does.
	body, err := io.ReadAll(io.LimitReader(req.Body, req.ContentLength+1))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	if int64(len(body)) != req.ContentLength {
		return nil, fmt.Errorf("client: http: ContentLength=%d with Body length %d", req.ContentLength, len(body))
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return o.base.RoundTrip(r)
}

// CloseIdleConnections closes the base transport's idle connections, as
// http.Client.CloseIdleConnections expects of its transport.
func (o oneWrite) CloseIdleConnections() {
	if c, ok := o.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
