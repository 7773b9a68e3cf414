package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "lock" {
		fmt.Fprintln(stderr, "usage: coord bench lock [flags]")
		return flag.ErrHelp
	}
	return benchLock(ctx, args[1:], stdout, stderr)
}
