package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/coordkit/coordkit/libs/server"
)

// reloadOnHangup reloads srv's TLS and tokens files on every SIGHUP until ctx ends or the
// returned stop is called. A file that fails to load keeps the one in force: the error is
// logged and the server goes on with what it had.
func reloadOnHangup(ctx context.Context, srv *server.Server, logger *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if err := srv.Reload(); err != nil {
					logger.Error("reload on SIGHUP failed: kept the files in force", "error", err)
				} else {
					logger.Info("reloaded TLS and tokens files on SIGHUP")
				}
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}
