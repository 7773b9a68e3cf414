package redisconf

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ScriptCall is one run of a script in RunScripts: the script with its keys and arguments,
// as Script.Run takes them.
type ScriptCall struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// RunScripts runs calls on rdb together, one round trip for all of them, and returns each
// call's command with its own reply or error: what Script.Run would have answered it. Each
// script stays one atomic step in Redis, and one call's failure is its own.
//
// It sends EVALSHA; the calls the server answered NOSCRIPT (they did not run: its script
// cache is new or was flushed) run again with Script.Run, which loads the script. rdb is a
// scripter from Pipelined, whose coalescer the calls skip (they are one pipeline already and
// leave at once, on the caller's goroutine), or a client; any other redis.Scripter cannot
// pipeline, so each call runs with Script.Run, all of them at once.
func RunScripts(ctx context.Context, rdb redis.Scripter, calls []ScriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	c := clientOf(rdb)
	if c == nil {
		runEach(ctx, rdb, calls, cmds)
		return cmds
	}
	for i, call := range calls {
		cmds[i] = redis.NewCmd(ctx, evalArgs("evalsha", call.Script.Hash(), call.Keys, call.Args)...)
	}
	process(ctx, c, cmds)
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		retry := make([]ScriptCall, len(again))
		for j, i := range again {
			retry[j] = calls[i]
		}
		ran := make([]*redis.Cmd, len(again))
		runEach(ctx, rdb, retry, ran)
		for j, i := range again {
			cmds[i] = ran[j]
		}
	}
	return cmds
}

// clientOf is the client RunScripts pipelines on: the one under a Pipelined scripter, rdb
// itself when it is a client, or nil.
func clientOf(rdb redis.Scripter) client {
	if s, ok := rdb.(*scripter); ok {
		return s.rdb
	}
	c, _ := rdb.(client)
	return c
}

// runEach runs every call with Script.Run, at once, and waits for all of them.
func runEach(ctx context.Context, rdb redis.Scripter, calls []ScriptCall, cmds []*redis.Cmd) {
	done := make(chan struct{}, len(calls))
	for i, call := range calls {
		go func() {
			defer func() { done <- struct{}{} }()
			cmds[i] = call.Script.Run(ctx, rdb, call.Keys, call.Args...)
		}()
	}
	for range calls {
		<-done
	}
}
