package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "lock":
			return benchLock(ctx, args[1:], stdout, stderr)
		case "id":
			return benchID(ctx, args[1:], stdout, stderr)
		case "contend":
			return benchContend(ctx, args[1:], stdout, stderr)
		case "task":
			return benchTask(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, "usage: coord bench lock|id|contend|task [flags]")
	return flag.ErrHelp
}
