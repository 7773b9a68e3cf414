package taskpick_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	taskpickv1 "github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestHostileInput sends the task service what curl users and attackers send as JSON:
// durations in Go syntax ("1m"), enum names and numbers that do not exist, megabyte values,
// invalid UTF-8, unknown fields, bad nested tasks. Every answer must be invalid_argument, name
// the field first, and stay short.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	inst := startInstance(t, "sqlite", sqliteStore(t)(t), nil)
	const svc = "/coordkit.taskpick.v1.TaskPickService/"
	mega := strings.Repeat("p", 1<<20-128)
	bad := connect.CodeInvalidArgument
	hostile := func(name, proc, body string, code connect.Code, field string) testenv.Hostile {
		return testenv.Hostile{Name: name, Procedure: proc, Body: body, Code: code, Field: field}
	}
	testenv.RunHostile(t, inst.url, []testenv.Hostile{
		hostile("pick ttl 1m", svc+"Pick", `{"pool":"p","ttl":"1m"}`, bad, "ttl"),
		hostile("pick wait 1m", svc+"Pick", `{"pool":"p","wait":"1m"}`, bad, "wait"),
		hostile("pick wait 2h", svc+"Pick", `{"pool":"p","wait":"7200s"}`, bad, "wait"),
		hostile("pick order name", svc+"Pick", `{"pool":"p","order":"ORDER_BOGUS"}`, bad, "order"),
		hostile("pick order number", svc+"Pick", `{"pool":"p","order":42}`, bad, "order"),
		hostile("pick count text", svc+"Pick", `{"pool":"p","count":"x"}`, bad, "count"),
		hostile("pick count over limit", svc+"Pick", `{"pool":"p","count":101}`, bad, "count"),
		hostile("pick pool 1 MB", svc+"Pick", `{"pool":"`+mega+`"}`, bad, "pool"),
		hostile("pick pool invalid UTF-8", svc+"Pick", "{\"pool\":\"\xff\xff\"}", bad, "pool"),
		hostile("pick unknown field", svc+"Pick", `{"pool":"p","limit":5}`, bad, "limit"),
		hostile("put run_at text", svc+"Put", `{"pool":"p","tasks":[{"id":"a"},{"id":"b","runAt":"tomorrow"}]}`, bad, "tasks[1].run_at"),
		hostile("put id 1 MB", svc+"Put", `{"pool":"p","tasks":[{"id":"`+mega+`"}]}`, bad, "tasks[0].id"),
		hostile("put id invalid UTF-8", svc+"Put", "{\"pool\":\"p\",\"tasks\":[{\"id\":\"\xc0\xaf\"}]}", bad, "tasks[0].id"),
		hostile("put payload not base64", svc+"Put", `{"pool":"p","tasks":[{"id":"a","payload":"%%%"}]}`, bad, "tasks[0].payload"),
		hostile("put task unknown field", svc+"Put", `{"pool":"p","tasks":[{"id":"a","delay":"5s"}]}`, bad, "tasks[0].delay"),
		hostile("put tasks not a list", svc+"Put", `{"pool":"p","tasks":"a,b"}`, bad, "tasks"),
		hostile("put no tasks", svc+"Put", `{"pool":"p"}`, bad, "tasks"),
		hostile("put max_attempts negative", svc+"Put", `{"pool":"p","tasks":[{"id":"a","max_attempts":-1}]}`, bad, "tasks[0].max_attempts"),
		hostile("put unique_key 1 MB", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"`+mega+`"}]}`, bad, "tasks[0].unique_key"),
		hostile("put unique_key 513 bytes", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"`+strings.Repeat("k", 513)+`"}]}`, bad, "tasks[0].unique_key"),
		hostile("put unique_key invalid UTF-8", svc+"Put", "{\"pool\":\"p\",\"tasks\":[{\"id\":\"a\",\"uniqueKey\":\"\xc0\xaf\"}]}", bad, "tasks[0].unique_key"),
		hostile("put unique_key NUL", svc+"Put", `{"pool":"p","tasks":[{"id":"a"},{"id":"b","uniqueKey":"k\u0000"}]}`, bad, "tasks[1].unique_key"),
		hostile("put unique_scope without key", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueScope":"UNIQUE_SCOPE_QUEUED"}]}`, bad, "tasks[0].unique_scope"),
		hostile("put unique_period without key", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniquePeriod":"60s"}]}`, bad, "tasks[0].unique_period"),
		hostile("put unique_scope unknown", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"k","uniqueScope":9}]}`, bad, "tasks[0].unique_scope"),
		hostile("put period scope without period", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"k","uniqueScope":"UNIQUE_SCOPE_PERIOD"}]}`, bad, "tasks[0].unique_period"),
		hostile("put period 0", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"k","uniqueScope":"UNIQUE_SCOPE_PERIOD","uniquePeriod":"0s"}]}`, bad, "tasks[0].unique_period"),
		hostile("put period negative", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"k","uniqueScope":"UNIQUE_SCOPE_PERIOD","uniquePeriod":"-5s"}]}`, bad, "tasks[0].unique_period"),
		hostile("put period 31 days", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"k","uniqueScope":"UNIQUE_SCOPE_PERIOD","uniquePeriod":"2678400s"}]}`, bad, "tasks[0].unique_period"),
		hostile("put period with active scope", svc+"Put", `{"pool":"p","tasks":[{"id":"a","uniqueKey":"k","uniqueScope":"UNIQUE_SCOPE_ACTIVE","uniquePeriod":"5s"}]}`, bad, "tasks[0].unique_period"),
		hostile("nack retry_after 1m", svc+"Nack", `{"pool":"p","id":"a","lease_token":"1","retry_after":"1m"}`, bad, "retry_after"),
		hostile("nack token text", svc+"Nack", `{"pool":"p","id":"a","lease_token":"abc"}`, bad, "lease_token"),
		hostile("ack token 0", svc+"Ack", `{"pool":"p","id":"a","lease_token":0}`, bad, "lease_token"),
		hostile("ack no lease_secret", svc+"Ack", `{"pool":"p","id":"a","lease_token":"1"}`, bad, "lease_secret"),
		hostile("extend lease_secret 1 MB", svc+"Extend", `{"pool":"p","id":"a","lease_token":"1","lease_secret":"`+mega+`"}`, bad, "lease_secret"),
		hostile("nack lease_secret a number", svc+"Nack", `{"pool":"p","id":"a","lease_token":"1","lease_secret":7}`, bad, "lease_secret"),
		hostile("extend ttl 1m", svc+"Extend", `{"pool":"p","id":"a","lease_token":"1","ttl":"1m"}`, bad, "ttl"),
		hostile("get id 1 MB", svc+"Get", `{"pool":"p","id":"`+mega+`"}`, bad, "id"),
		hostile("requeue ids not strings", svc+"Requeue", `{"pool":"p","ids":[1,2]}`, bad, "ids[0]"),
		hostile("batch operations not a list", svc+"Batch", `{"operations":{"ack":{}}}`, bad, "operations"),
		hostile("batch ack token text", svc+"Batch", `{"operations":[{"get":{"pool":"p","id":"a"}},{"ack":{"pool":"p","id":"a","lease_token":"abc"}}]}`, bad, "operations[1].ack.lease_token"),
		hostile("batch two kinds in one operation", svc+"Batch", `{"operations":[{"ack":{"pool":"p"},"get":{"pool":"p"}}]}`, bad, "operations[0].get"),
		hostile("batch pick", svc+"Batch", `{"operations":[{"pick":{"pool":"p"}}]}`, bad, "operations[0].pick"),
		hostile("body not JSON", svc+"Pick", `pool=p`, bad, "request body"),
		hostile("settings initial negative", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"-5s"}}}`, bad, "settings.retry.initial"),
		hostile("settings initial zero", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"0s"}}}`, bad, "settings.retry.initial"),
		hostile("settings initial missing", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"jitter":0.5}}}`, bad, "settings.retry.initial"),
		hostile("settings initial 31 days", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"2678400s"}}}`, bad, "settings.retry.initial"),
		hostile("settings cap below initial", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"10s","max":"1s"}}}`, bad, "settings.retry.max"),
		hostile("settings cap negative", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"1s","max":"-1s"}}}`, bad, "settings.retry.max"),
		hostile("settings jitter over 1", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"1s","jitter":1.5}}}`, bad, "settings.retry.jitter"),
		hostile("settings jitter negative", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"1s","jitter":-0.1}}}`, bad, "settings.retry.jitter"),
		hostile("settings jitter NaN", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"1s","jitter":"NaN"}}}`, bad, "settings.retry.jitter"),
		hostile("settings multiplier below 1", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"1s","multiplier":0.5}}}`, bad, "settings.retry.multiplier"),
		hostile("settings multiplier infinite", svc+"SetPoolSettings", `{"pool":"p","settings":{"retry":{"initial":"1s","multiplier":"Infinity"}}}`, bad, "settings.retry.multiplier"),
		hostile("settings max_attempts 0", svc+"SetPoolSettings", `{"pool":"p","settings":{"maxAttempts":0}}`, bad, "settings.max_attempts"),
		hostile("settings max_attempts 2^31", svc+"SetPoolSettings", `{"pool":"p","settings":{"maxAttempts":2147483648}}`, bad, "settings.max_attempts"),
		hostile("settings max_leased 2^31", svc+"SetPoolSettings", `{"pool":"p","settings":{"maxLeased":2147483648}}`, bad, "settings.max_leased"),
		hostile("settings max_leased 2^32", svc+"SetPoolSettings", `{"pool":"p","settings":{"maxLeased":4294967296}}`, bad, "settings.max_leased"),
		hostile("settings max_leased negative", svc+"SetPoolSettings", `{"pool":"p","settings":{"maxLeased":-1}}`, bad, "settings.max_leased"),
		hostile("settings rate negative", svc+"SetPoolSettings", `{"pool":"p","settings":{"rate":-1}}`, bad, "settings.rate"),
		hostile("settings rate NaN", svc+"SetPoolSettings", `{"pool":"p","settings":{"rate":"NaN"}}`, bad, "settings.rate"),
		hostile("settings rate infinite", svc+"SetPoolSettings", `{"pool":"p","settings":{"rate":"Infinity"}}`, bad, "settings.rate"),
		hostile("settings rate above a million", svc+"SetPoolSettings", `{"pool":"p","settings":{"rate":1000001}}`, bad, "settings.rate"),
		hostile("settings burst without rate", svc+"SetPoolSettings", `{"pool":"p","settings":{"burst":5}}`, bad, "settings.burst"),
		hostile("settings burst 2^31", svc+"SetPoolSettings", `{"pool":"p","settings":{"rate":1,"burst":2147483648}}`, bad, "settings.burst"),
		hostile("settings paused a string", svc+"SetPoolSettings", `{"pool":"p","settings":{"paused":"yes"}}`, bad, "settings.paused"),
		hostile("settings pool 1 MB", svc+"SetPoolSettings", `{"pool":"`+mega+`"}`, bad, "pool"),
		hostile("pause pool 1 MB", svc+"PausePool", `{"pool":"`+mega+`"}`, bad, "pool"),
		hostile("resume pool empty", svc+"ResumePool", `{"pool":""}`, bad, "pool"),
		hostile("get settings pool NUL", svc+"GetPoolSettings", `{"pool":"a\u0000b"}`, bad, "pool"),
		hostile("cancel id 1 MB", svc+"CancelTask", `{"pool":"p","id":"`+mega+`"}`, bad, "id"),
		hostile("cancel no id", svc+"CancelTask", `{"pool":"p"}`, bad, "id"),
		hostile("schedule name 1 MB", svc+"PutSchedule", `{"pool":"p","name":"`+mega+`","spec":"@daily"}`, bad, "name"),
		hostile("schedule name invalid UTF-8", svc+"PutSchedule", "{\"pool\":\"p\",\"name\":\"\xc0\xaf\",\"spec\":\"@daily\"}", bad, "name"),
		hostile("schedule name NUL", svc+"GetSchedule", `{"pool":"p","name":"a\u0000b"}`, bad, "name"),
		hostile("schedule spec 1 MB", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"`+mega+`"}`, bad, "spec"),
		hostile("schedule spec NUL", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"@every 1s\u0000"}`, bad, "spec"),
		hostile("schedule spec invalid UTF-8", svc+"PutSchedule", "{\"pool\":\"p\",\"name\":\"s\",\"spec\":\"* * * * \xff\"}", bad, "spec"),
		hostile("schedule timezone NUL", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"@daily","timezone":"UTC\u0000"}`, bad, "timezone"),
		hostile("schedule timezone 1 MB", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"@daily","timezone":"`+mega+`"}`, bad, "timezone"),
		hostile("schedule missed unknown", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"@daily","missed":"SCHEDULE_MISSED_ALL"}`, bad, "missed"),
		hostile("schedule template max_attempts text", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"@daily","template":{"maxAttempts":"x"}}`, bad, "template.max_attempts"),
		hostile("schedule template payload 1 MB", svc+"PutSchedule", `{"pool":"p","name":"s","spec":"@daily","template":{"payload":"`+strings.Repeat("QUFB", 1<<18-64)+`"}}`, bad, "template.payload"),
		hostile("list schedules after 1 MB", svc+"ListSchedules", `{"pool":"p","after":"`+mega+`"}`, bad, "after"),
	})
	// None of it was stored.
	got, err := inst.client.GetPoolSettings(ctx, &taskpickv1.GetPoolSettingsRequest{Pool: "p"})
	if err != nil || got.GetStored() {
		t.Fatalf("after hostile SetPoolSettings calls: %v %v, want no record", got, err)
	}
	if l, err := inst.client.ListSchedules(ctx, &taskpickv1.ListSchedulesRequest{Pool: "p"}); err != nil || len(l.GetSchedules()) != 0 {
		t.Fatalf("after hostile PutSchedule calls: %v %v, want no schedule", l, err)
	}
}
