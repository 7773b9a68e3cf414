package e2e

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// coordBin is the static coord binary every e2e test runs, built once per test binary.
var coordBin = sync.OnceValues(buildCoord)

// binDir holds the built binary; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coordkit-e2e-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the repository's top directory (this package lives in e2e/).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// buildCoord builds coord with deploy/build-static.sh, the script deploy/Dockerfile runs, so
// the tests exercise the binary the image ships.
func buildCoord() (string, error) {
	out := filepath.Join(binDir, "coord")
	cmd := exec.Command("sh", filepath.Join(repoRoot(), "deploy", "build-static.sh"), out)
	cmd.Env = append(os.Environ(), "COORDKIT_VERSION=e2e")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, out: string(b)}
	}
	return out, nil
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "e2e: deploy/build-static.sh: " + e.err.Error() + "\n" + e.out
}

// coordPath returns the built binary, failing the test when it could not be built.
func coordPath(t testing.TB) string {
	t.Helper()
	bin, err := coordBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestStaticBinary: the image's binary must run in an empty image, so it may need no dynamic
// loader and no shared library.
func TestStaticBinary(t *testing.T) {
	f, err := elf.Open(coordPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("coord asks for a dynamic loader (PT_INTERP): it would not start in a scratch image")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Fatalf("coord links shared libraries %v (err %v)", libs, err)
	}
	out, err := exec.Command(coordPath(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("coord version: %v: %s", err, out)
	}
	if want := "coord e2e,"; len(out) < len(want) || string(out[:len(want)]) != want {
		t.Fatalf("coord version = %q, want it to start %q (the build's COORDKIT_VERSION)", out, want)
	}
}
