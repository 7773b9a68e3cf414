//go:build !linux

package main

import "golang.org/x/sys/unix"

// ioctlGetTermios reads a terminal's settings: it fails on anything but a terminal.
const ioctlGetTermios = unix.TIOCGETA
