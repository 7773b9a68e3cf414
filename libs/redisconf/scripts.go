package redisconf

import (
	"context"
	"sync"

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
// cache is new or was flushed) run again with Script.Run, which loads the script. On a
// scripter from Pipelined the calls go through its coalescer as one unit (DoAll): at once,
// as one pipeline on the caller's goroutine, when a pipeline slot is free, else queued with
// the other scripts, so a caller with many scripts takes no more of the client's connections
// than one with one. On a client they go out as one pipeline; any other redis.Scripter
// cannot pipeline, so each call runs with Script.Run, all of them at once.
func RunScripts(ctx context.Context, rdb redis.Scripter, calls []ScriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 0 {
		return cmds
	}
	s, pipelined := rdb.(*scripter)
	c, isClient := rdb.(client)
	if !pipelined && !isClient {
		runEach(ctx, rdb, calls, cmds)
		return cmds
	}
	for i, call := range calls {
		cmds[i] = redis.NewCmd(ctx, evalArgs("evalsha", call.Script.Hash(), call.Keys, call.Args)...)
	}
	if pipelined {
		for i, r := range s.cmds.DoAll(ctx, cmds) {
			if r.Err != nil { // never sent, or given up on: a pipeline may still fill cmds[i]
				cmds[i] = failedCmd(ctx, cmds[i], r.Err)
			}
		}
	} else {
		process(ctx, c, cmds)
	}
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

// runEach runs every call with Script.Run, at once, and waits for all of them. A panic in
// one (a bug in a driver) is raised again on the caller's goroutine once all are done, where
// the caller's recovery sees it, instead of killing the process from a goroutine of its own.
func runEach(ctx context.Context, rdb redis.Scripter, calls []ScriptCall, cmds []*redis.Cmd) {
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for i, call := range calls {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					once.Do(func() { panicked = p })
				}
			}()
			cmds[i] = call.Script.Run(ctx, rdb, call.Keys, call.Args...)
		})
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
