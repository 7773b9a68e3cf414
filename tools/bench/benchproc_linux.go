package main

import "syscall"

// serviceProcAttr makes the service child process die with the bench (SIGKILL when the
// thread that started it exits, which startServiceProcess keeps alive until the child is
// gone), even when the bench itself is killed before it can stop the child.
func serviceProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
