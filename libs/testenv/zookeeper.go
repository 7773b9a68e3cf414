package testenv

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ZooKeeperServerScript starts a ZooKeeper server in the foreground:
// $COORDKIT_TEST_ZK_SERVER or the Debian package's zkServer.sh, which deploy/dev/backends.sh
// installs.
func ZooKeeperServerScript() string {
	return env("COORDKIT_TEST_ZK_SERVER", "/usr/share/zookeeper/bin/zkServer.sh")
}

// ZooKeeperProcess is a private standalone ZooKeeper server on a loopback port, for tests that
// must stop and restart the server (the shared one on 2181 serves other tests meanwhile).
// Its data survives Stop, as a real server's disk does, so sessions and ephemeral nodes are
// restored on Start. It has tickTime 1s and minSessionTimeout 2s, like the dev server.
type ZooKeeperProcess struct {
	t    testing.TB
	dir  string
	addr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running process exits
}

// StartZooKeeper starts a private ZooKeeper server and stops it when the test ends.
func StartZooKeeper(t testing.TB) *ZooKeeperProcess {
	t.Helper()
	script := ZooKeeperServerScript()
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("testenv: no ZooKeeper server script at %s (%v); install it with deploy/dev/backends.sh up or set COORDKIT_TEST_ZK_SERVER", script, err)
	}
	port := FreePort(t)

	z := &ZooKeeperProcess{t: t, dir: t.TempDir(), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	// No admin server (it would take port 8080) and only the four-letter word the readiness
	// check needs. No fsync per write: a test server shares the disk with every other test,
	// and Stop kills the process, not the machine, so written data survives anyway.
	cfg := fmt.Sprintf(`tickTime=1000
initLimit=10
syncLimit=5
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
minSessionTimeout=2000
maxSessionTimeout=60000
4lw.commands.whitelist=srvr
forceSync=no
`, filepath.Join(z.dir, "data"), port)
	if err := os.WriteFile(filepath.Join(z.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatalf("testenv: write zoo.cfg: %v", err)
	}
	t.Cleanup(z.Stop)
	z.Start()
	return z
}

// Addr is the server's host:port.
func (z *ZooKeeperProcess) Addr() string { return z.addr }

// Start starts the server (again) on the same port and data, and returns once it serves.
func (z *ZooKeeperProcess) Start() {
	z.t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd != nil {
		return
	}
	cmd := exec.Command(ZooKeeperServerScript(), "start-foreground", filepath.Join(z.dir, "zoo.cfg"))
	// A small heap and the client compiler: a test server starts in about half a second.
	cmd.Env = append(os.Environ(),
		"ZOO_LOG_DIR="+z.dir,
		"JVMFLAGS=-Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
	)
	out := new(LogBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		z.t.Fatalf("testenv: start ZooKeeper: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // a killed server exits with an error by design
		close(done)
	}()
	z.cmd, z.done = cmd, done

	deadline := time.Now().Add(30 * time.Second)
	for !zkServing(z.addr) {
		select {
		case <-done:
			z.cmd = nil
			z.t.Fatalf("testenv: ZooKeeper on %s exited while starting:\n%s", z.addr, out.String())
		default:
		}
		if time.Now().After(deadline) {
			z.t.Fatalf("testenv: ZooKeeper on %s did not answer within 30s:\n%s", z.addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server as a crash would (SIGKILL) and waits for it to exit. Data written
// before stays: ZooKeeper syncs its transaction log before it answers a write.
func (z *ZooKeeperProcess) Stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd == nil {
		return
	}
	z.cmd.Process.Kill() //nolint:errcheck // it may have exited already
	<-z.done
	z.cmd = nil
}

// zkServing reports whether a ZooKeeper server at addr serves clients. "ruok" is not enough:
// a starting server answers imok before it serves, and may drop a session handshake then.
// "srvr" reports the server's mode only once it serves.
func zkServing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a failed deadline fails the read
	if _, err := c.Write([]byte("srvr")); err != nil {
		return false
	}
	out, _ := io.ReadAll(c)
	return bytes.Contains(out, []byte("Mode: standalone"))
}
