package redisconf

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/coordkit/coordkit/libs/client/batch"
)

// pipelineInFlight is how many pipelines one Pipelined client keeps in flight before
// further scripts queue for the next one.
const pipelineInFlight = 2

// pipelineLimit caps the scripts of one pipeline.
const pipelineLimit = 256

// scripter runs scripts through a batch.Coalescer: scripts that callers send while earlier
// ones are in flight leave together as one pipeline.
type scripter struct {
	rdb  redis.UniversalClient
	cmds *batch.Coalescer[*redis.Cmd, struct{}]
}

// Pipelined returns a redis.Scripter over rdb that pipelines scripts sent at the same time:
// a script sent while nothing is in flight goes out at once, alone; scripts sent while the
// connection slots are busy queue and leave together, one round trip for all of them, the
// moment a slot frees (natural batching, no timer). Each script still gets its own reply or
// error and stays one atomic step in Redis, so callers see exactly what rdb would answer.
// ScriptExists and ScriptLoad go straight to rdb.
func Pipelined(rdb redis.UniversalClient) redis.Scripter {
	s := &scripter{rdb: rdb}
	s.cmds = batch.New(s.send, batch.Config{MaxInFlight: pipelineInFlight, MaxBatch: pipelineLimit})
	return s
}

// send runs cmds through process; every command keeps its own error.
func (s *scripter) send(ctx context.Context, cmds []*redis.Cmd) ([]batch.Result[struct{}], error) {
	process(ctx, s.rdb, cmds)
	return make([]batch.Result[struct{}], len(cmds)), nil
}

// client is what process needs of a Redis client: *redis.Client, *redis.ClusterClient and
// every redis.UniversalClient have it.
type client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// process runs cmds on rdb, one alone and several as one pipeline; every command keeps its
// own reply or error.
func process(ctx context.Context, rdb client, cmds []*redis.Cmd) {
	if len(cmds) == 1 {
		_ = rdb.Process(ctx, cmds[0])
		return
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range cmds {
			_ = p.Process(ctx, c)
		}
		return nil
	})
}

// run sends cmd through the coalescer. A caller whose context ends first gets a command of
// its own carrying the error, never cmd, which the pipeline may still be filling in.
func (s *scripter) run(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if _, err := s.cmds.Do(ctx, cmd); err != nil {
		return failedCmd(ctx, cmd, err)
	}
	return cmd
}

// failedCmd is a command of its own, with cmd's arguments, failed with err.
func failedCmd(ctx context.Context, cmd *redis.Cmd, err error) *redis.Cmd {
	failed := redis.NewCmd(ctx, cmd.Args()...)
	failed.SetErr(err)
	return failed
}

// evalArgs builds the arguments of EVAL and its variants.
func evalArgs(name, script string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// Eval implements redis.Scripter.
func (s *scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, redis.NewCmd(ctx, evalArgs("eval", script, keys, args)...))
}

// EvalSha implements redis.Scripter.
func (s *scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, redis.NewCmd(ctx, evalArgs("evalsha", sha1, keys, args)...))
}

// EvalRO implements redis.Scripter.
func (s *scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, redis.NewCmd(ctx, evalArgs("eval_ro", script, keys, args)...))
}

// EvalShaRO implements redis.Scripter.
func (s *scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, redis.NewCmd(ctx, evalArgs("evalsha_ro", sha1, keys, args)...))
}

// ScriptExists implements redis.Scripter.
func (s *scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.rdb.ScriptExists(ctx, hashes...)
}

// ScriptLoad implements redis.Scripter.
func (s *scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return s.rdb.ScriptLoad(ctx, script)
}
