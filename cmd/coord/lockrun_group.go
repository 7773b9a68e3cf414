package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startsOwnGroup says whether `coord lock run` starts its command in a process group of its
// own, so that stopping it (a lost lease, a signal passed on) reaches everything it started:
// `sh -c 'step1; step2'` or a script's background jobs would otherwise go on running the
// guarded work after the lock is gone. Not when stdin is a terminal: a command outside the
// terminal's foreground group is stopped (SIGTTIN) as soon as it reads from it, so an
// interactive command keeps coord's group and only it is signalled.
func startsOwnGroup(stdin io.Reader) bool {
	f, ok := stdin.(*os.File)
	if !ok {
		return true
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err != nil
}

// signalCommand sends sig to cmd's process group when it has its own, else to cmd alone.
// It fails only when they have all exited meanwhile.
func signalCommand(cmd *exec.Cmd, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok || cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid {
		return cmd.Process.Signal(sig)
	}
	return syscall.Kill(-cmd.Process.Pid, s)
}

// stopGroup waits, after cmd itself has exited, for the rest of its own process group to
// exit too, or for kill, and then sends the remainder SIGKILL.
func stopGroup(cmd *exec.Cmd, kill <-chan time.Time) {
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid {
		return
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(-cmd.Process.Pid, 0) == nil {
		select {
		case <-kill:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return
		case <-tick.C:
		}
	}
}
