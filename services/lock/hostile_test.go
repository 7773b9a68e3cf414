package lock_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestHostileInput sends the lock service what curl users and attackers send as JSON:
// durations in Go syntax ("1m"), megabyte values, invalid UTF-8, wrong types, unknown
// fields. Every answer must be invalid_argument, name the field first, and stay short.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t))
	const svc = "/coordkit.lock.v1.LockService/"
	mega := strings.Repeat("k", 1<<20-64)
	bad := connect.CodeInvalidArgument
	hostile := func(name, proc, body string, code connect.Code, field string) testenv.Hostile {
		return testenv.Hostile{Name: name, Procedure: proc, Body: body, Code: code, Field: field}
	}
	testenv.RunHostile(t, inst.url, []testenv.Hostile{
		hostile("acquire ttl 1m", svc+"Acquire", `{"key":"k","ttl":"1m"}`, bad, "ttl"),
		hostile("acquire ttl number", svc+"Acquire", `{"key":"k","ttl":30}`, bad, "ttl"),
		hostile("acquire ttl negative", svc+"Acquire", `{"key":"k","ttl":"-5s"}`, bad, "ttl"),
		hostile("acquire ttl 100 days", svc+"Acquire", `{"key":"k","ttl":"8640000s"}`, bad, "ttl"),
		hostile("acquire ttl beyond Duration", svc+"Acquire", `{"key":"k","ttl":"999999999999s"}`, bad, "ttl"),
		hostile("acquire wait 1h30m", svc+"Acquire", `{"key":"k","wait":"1h30m"}`, bad, "wait"),
		hostile("acquire key 1 MB", svc+"Acquire", `{"key":"`+mega+`"}`, bad, "key"),
		hostile("acquire key invalid UTF-8", svc+"Acquire", "{\"key\":\"\xed\xa0\x80\"}", bad, "key"),
		hostile("acquire key NUL", svc+"Acquire", `{"key":"a\u0000b"}`, bad, "key"),
		hostile("acquire key number", svc+"Acquire", `{"key":5}`, bad, "key"),
		hostile("acquire backend 1 MB", svc+"Acquire", `{"key":"k","backend":"`+mega+`"}`, bad, "backend"),
		hostile("acquire owner 1 MB", svc+"Acquire", `{"key":"k","owner":"`+mega+`"}`, bad, "owner"),
		hostile("acquire fair text", svc+"Acquire", `{"key":"k","fair":"yes"}`, bad, "fair"),
		hostile("acquire unknown field", svc+"Acquire", `{"key":"k","timeout":"5s"}`, bad, "timeout"),
		hostile("release token text", svc+"Release", `{"key":"k","owner":"0123456789abcdef","fencing_token":"x"}`, bad, "fencing_token"),
		hostile("release token negative", svc+"Release", `{"key":"k","owner":"0123456789abcdef","fencingToken":-1}`, bad, "fencing_token"),
		hostile("renew ttl 1m", svc+"Renew", `{"key":"k","owner":"0123456789abcdef","ttl":"1m"}`, bad, "ttl"),
		hostile("inspect empty key", svc+"Inspect", `{}`, bad, "key"),
		hostile("inspect key 1 MB", svc+"Inspect", `{"key":"`+mega+`"}`, bad, "key"),
		hostile("body not JSON", svc+"Acquire", `key=k`, bad, "request body"),
	})
}
