package server

import (
	"errors"
	"regexp"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
)

// fieldFirst is how every decode error must start: a field path, a quoted unknown key, or
// "request body", then a colon.
var fieldFirst = func() *regexp.Regexp {
	seg := `([A-Za-z0-9_]+|"(\\.|[^"\\])*"( \(\d+ bytes\))?)(\[\d+\])?`
	return regexp.MustCompile(`^(request body|` + seg + `(\.` + seg + `)*):`)
}()

// FuzzJSONDecodeError feeds arbitrary bodies to the JSON codec with a nested request type:
// it must never fail the codec itself, and every body it refuses must be answered
// invalid_argument with a short, valid UTF-8 message that starts with a field.
func FuzzJSONDecodeError(f *testing.F) {
	for _, seed := range []string{
		`{"pool":"p","tasks":[{"id":"a","runAt":"tomorrow"}]}`,
		`{"pool":"p","tasks":[{"id":"a","payload":"!!"}],"x":1}`,
		`{"tasks":[{"max_attempts":1,"maxAttempts":2}]}`,
		"{\"pool\":\"\xff\"}",
		`{"pool":`, `[]`, `null`, ``, `{"pool":"p"} {}`,
	} {
		f.Add([]byte(seed))
	}
	codec := jsonCodec{name: "json"}
	f.Fuzz(func(t *testing.T, body []byte) {
		m := new(taskpickv1.PutRequest)
		if err := codec.Unmarshal(body, m); err != nil {
			t.Fatalf("Unmarshal failed instead of marking the message: %v", err)
		}
		err := decodeFailure(m)
		if err == nil {
			if len(m.ProtoReflect().GetUnknown()) != 0 {
				t.Fatalf("decoded with unknown fields left: %x", m.ProtoReflect().GetUnknown())
			}
			return
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
			t.Fatalf("error %v is not invalid_argument", err)
		}
		msg := ce.Message()
		if len(msg) > 200 || !utf8.ValidString(msg) || !fieldFirst.MatchString(msg) {
			t.Fatalf("body %q: message %q (%d bytes) is too long, not UTF-8 or names no field first", body, msg, len(msg))
		}
		m.ProtoReflect().SetUnknown(nil)
		if !proto.Equal(m, &taskpickv1.PutRequest{}) {
			t.Fatalf("refused message kept decoded fields: %v", m)
		}
	})
}
