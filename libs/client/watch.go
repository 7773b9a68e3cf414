package client

import (
	"context"
	"iter"

	lockv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/lock/v1"
)

// Watch streams the events of one lock (req.Key; the first message is its state) or of every
// key starting with req.Prefix, as an iterator: it yields each message with a nil error and,
// when the stream fails, a nil message with the error that ended it (resource_exhausted: the
// watcher fell behind, or the instance or the token has too many streams open; watch again
// later; unauthenticated: the token was removed from the server's tokens file). Breaking out of the loop or canceling ctx ends the
// stream. A backend left empty is the client's (WithBackend), else the service's default.
//
//	for msg, err := range c.Watch(ctx, &lockv1.WatchRequest{Key: "order:42"}) {
//		if err != nil { ... } // resource_exhausted: fell behind; watch again
//		fmt.Println(msg.GetState(), msg.GetEvent())
//	}
func (c *Client) Watch(ctx context.Context, req *lockv1.WatchRequest) iter.Seq2[*lockv1.WatchResponse, error] {
	return func(yield func(*lockv1.WatchResponse, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if req.GetBackend() == "" && c.backend != "" {
			req = &lockv1.WatchRequest{Key: req.GetKey(), Prefix: req.GetPrefix(), Backend: c.backend}
		}
		stream, err := c.locks.Watch(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		defer stream.Close()
		for stream.Receive() {
			if !yield(stream.Msg(), nil) {
				return
			}
		}
		if err := stream.Err(); err != nil {
			yield(nil, err)
		}
	}
}
