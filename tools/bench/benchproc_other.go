//go:build !linux

package main

import "syscall"

// serviceProcAttr is nothing special where there is no Pdeathsig: the bench stops the child
// at its end and when its context ends, but a killed bench leaves the child running.
func serviceProcAttr() *syscall.SysProcAttr { return nil }
