package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port nobody listens on right now, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer safe for a server process's writer and the test's reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startUntilReady starts cmd and polls ready until it succeeds, the process exits, or timeout
// passes (then the process is killed). done is closed when the process exits. name and out
// (the process's output) make the error say what failed.
func startUntilReady(cmd *exec.Cmd, name string, out *syncBuffer, ready func() error, timeout time.Duration) (done chan struct{}, err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done = make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // the exit is expected: the test kills it
		close(done)
	}()
	deadline := time.Now().Add(timeout)
	for {
		if err := ready(); err == nil {
			return done, nil
		}
		select {
		case <-done:
			return nil, fmt.Errorf("%s exited: %s", name, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill() //nolint:errcheck // giving up on it
			<-done
			return nil, fmt.Errorf("%s not ready within %v: %s", name, timeout, out.String())
		}
	}
}
