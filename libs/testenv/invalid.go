package testenv

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// WantInvalidField fails unless err is a Connect invalid_argument whose message starts with
// one of fields and a colon, the way every coordkit service names the field it rejects.
func WantInvalidField(t testing.TB, err error, fields ...string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("error %v is not invalid_argument", err)
	}
	field, _, _ := strings.Cut(ce.Message(), ":")
	if !slices.Contains(fields, field) {
		t.Fatalf("error %q names none of the fields %v", ce.Message(), fields)
	}
}
