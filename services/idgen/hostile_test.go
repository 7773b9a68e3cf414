package idgen_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	idgenv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/idgen/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestHostileInput sends what curl users and attackers send: megabyte values, enum numbers
// and names that do not exist, invalid UTF-8, strings for numbers, unknown fields. Every
// answer must be its code, name the field first, and stay short.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, stores[1].open(t))
	_, err := inst.client.CreateTag(context.Background(), &idgenv1.CreateTagRequest{Tag: "gone", Start: 1000})
	noErr(t, err)
	_, err = inst.client.DeleteTag(context.Background(), &idgenv1.DeleteTagRequest{Tag: "gone"})
	noErr(t, err)

	const svc = "/coordkit.idgen.v1.IdService/"
	mega := strings.Repeat("9", 1<<20-64)
	bad := connect.CodeInvalidArgument
	hostile := func(name, proc, body string, code connect.Code, field string) testenv.Hostile {
		return testenv.Hostile{Name: name, Procedure: proc, Body: body, Code: code, Field: field}
	}
	testenv.RunHostile(t, inst.url, []testenv.Hostile{
		hostile("decode 1 MB id", svc+"Decode", `{"id":"`+mega+`"}`, bad, "id"),
		hostile("decode 20 digits", svc+"Decode", `{"id":"99999999999999999999"}`, bad, "id"),
		hostile("decode text", svc+"Decode", `{"id":"abc"}`, bad, "id"),
		hostile("decode invalid UTF-8", svc+"Decode", "{\"id\":\"1\xff\"}", bad, "id"),
		hostile("decode number", svc+"Decode", `{"id":123}`, bad, "id"),
		hostile("next enum number", svc+"Next", `{"mode":99,"count":1}`, bad, "mode"),
		hostile("next negative enum number", svc+"Next", `{"mode":-3,"count":1}`, bad, "mode"),
		hostile("next enum name", svc+"Next", `{"mode":"MODE_BOGUS","count":1}`, bad, "mode"),
		hostile("next enum name 1 MB", svc+"Next", `{"mode":"`+mega+`"}`, bad, "mode"),
		hostile("next count text", svc+"Next", `{"mode":"MODE_UUID_V4","count":"x"}`, bad, "count"),
		hostile("next count negative", svc+"Next", `{"mode":"MODE_UUID_V4","count":-1}`, bad, "count"),
		hostile("next count 2^32", svc+"Next", `{"mode":"MODE_UUID_V4","count":4294967296}`, bad, "count"),
		hostile("next tag invalid UTF-8", svc+"Next", "{\"mode\":\"MODE_SEGMENT\",\"tag\":\"\xc3\x28\",\"count\":1}", bad, "tag"),
		hostile("next tag 1 MB", svc+"Next", `{"mode":"MODE_SEGMENT","tag":"`+mega+`","count":1}`, bad, "tag"),
		hostile("next unknown field", svc+"Next", `{"mode":"MODE_UUID_V4","count":1,"batch":5}`, bad, "batch"),
		hostile("next camelCase typo", svc+"Next", `{"Mode":"MODE_UUID_V4","count":1}`, bad, "Mode"),
		hostile("create start text", svc+"CreateTag", `{"tag":"t","start":"one"}`, bad, "start"),
		hostile("create step float", svc+"CreateTag", `{"tag":"t","step":1.5}`, bad, "step"),
		hostile("create description 1 MB", svc+"CreateTag", `{"tag":"t","description":"`+mega+`"}`, bad, "description"),
		hostile("create description invalid UTF-8", svc+"CreateTag", "{\"tag\":\"t\",\"description\":\"\xff\"}", bad, "description"),
		hostile("create below tombstone", svc+"CreateTag", `{"tag":"gone","start":5}`, connect.CodeFailedPrecondition, "start"),
		hostile("update nothing", svc+"UpdateTag", `{"tag":"t"}`, bad, "step"),
		hostile("update step 0", svc+"UpdateTag", `{"tag":"t","step":0}`, bad, "step"),
		hostile("update step text", svc+"UpdateTag", `{"tag":"t","step":"1m"}`, bad, "step"),
		hostile("update missing tag", svc+"UpdateTag", `{"tag":"never","step":10}`, connect.CodeNotFound, "tag"),
		hostile("update deleted tag", svc+"UpdateTag", `{"tag":"gone","description":""}`, connect.CodeNotFound, "tag"),
		hostile("delete missing tag", svc+"DeleteTag", `{"tag":"never"}`, connect.CodeNotFound, "tag"),
		hostile("delete tag 1 MB", svc+"DeleteTag", `{"tag":"`+mega+`"}`, bad, "tag"),
		hostile("delete empty tag", svc+"DeleteTag", `{}`, bad, "tag"),
		hostile("list unknown field", svc+"ListTags", `{"all":true}`, bad, "all"),
		hostile("body not JSON", svc+"Next", `mode=MODE_UUID_V4`, bad, "request body"),
	})
}

// TestHostileBinary sends the same through the Go client (binary protobuf), where the values
// decode and the service's own validation must keep its errors short.
func TestHostileBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startInstance(t, stores[1].open(t)).client
	mega := strings.Repeat("7", 1<<20-64)
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"decode 1 MB id", func() error { _, err := c.Decode(ctx, &idgenv1.DecodeRequest{Id: mega}); return err }, "id"},
		{"next enum number", func() error {
			_, err := c.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode(1 << 30), Count: 1})
			return err
		}, "mode"},
		{"next tag 1 MB", func() error {
			_, err := c.Next(ctx, &idgenv1.NextRequest{Mode: idgenv1.Mode_MODE_SEGMENT, Tag: mega, Count: 1})
			return err
		}, "tag"},
		{"delete tag 1 MB", func() error { _, err := c.DeleteTag(ctx, &idgenv1.DeleteTagRequest{Tag: mega}); return err }, "tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			wantCode(t, err, connect.CodeInvalidArgument, tt.field)
			if msg := connect.CodeOf(err).String() + err.Error(); len(err.Error()) > testenv.MaxErrorMessageBytes {
				t.Fatalf("message is %d bytes: %q", len(msg), msg)
			}
		})
	}
}
