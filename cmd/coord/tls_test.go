package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordkit/coordkit/libs/testenv"
)

// TestCLITLSAndToken runs `coord serve` with TLS and bearer-token auth and calls it with the
// client flags: --ca-file trusts its private CA, --token (or COORDKIT_TOKEN's flag) is sent
// on unary and streaming calls alike; without either the call fails with exit 3.
func TestCLITLSAndToken(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	const token = "cli-token-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("cli "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", addr, "--data-dir", t.TempDir(), "--log-level", "warn",
			"--tls-cert", certs.CertFile, "--tls-key", certs.KeyFile, "--auth-tokens-file", tokens}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() { cancel(); <-done })
	url := "https://" + addr
	tlsArgs := []string{"--server", url, "--ca-file", certs.CAFile}
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		// gRPC health needs no token, so that a HEALTHCHECK holds no secret.
		if r := cli(t, append([]string{"health"}, tlsArgs...)...); r.code == 0 {
			break
		} else if time.Since(start) > 15*time.Second {
			t.Fatalf("health over TLS = exit %d %q", r.code, r.stderr)
		}
	}

	authed := append(append([]string{}, tlsArgs...), "--token", token)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{name: "token and CA", args: authed, code: 0},
		{name: "no token", args: tlsArgs, code: exitUnavailable, stderr: "unauthenticated"},
		{name: "wrong token", args: append(append([]string{}, tlsArgs...), "--token", "wrong-token-0123456789abcdef"), code: exitUnavailable, stderr: "unauthenticated"},
		{name: "system roots", args: []string{"--server", url, "--token", token}, code: exitUnavailable, stderr: "certificate"},
		{name: "plain http", args: []string{"--server", "http://" + addr, "--token", token}, code: exitUnavailable},
		{name: "missing CA file", args: []string{"--server", url, "--ca-file", filepath.Join(t.TempDir(), "nope.pem")}, code: exitUsage, stderr: "CA file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cli(t, append([]string{"lock", "inspect", "cli:tls"}, tt.args...)...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("lock inspect %s = exit %d, stderr %q; want %d with %q", strings.Join(tt.args, " "), r.code, r.stderr, tt.code, tt.stderr)
			}
		})
	}

	// Streaming: watch sends the token too, and fails without it.
	wctx, stop := context.WithCancel(context.Background())
	var out lockedBuffer
	watched := make(chan error, 1)
	go func() {
		watched <- run(wctx, append([]string{"lock", "watch", "cli:tls", "--json"}, authed...), &out, &out)
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), `"state"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("watch over TLS with a token printed %q, want the state", out.String())
		}
	}
	stop()
	if err := <-watched; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	if r := cli(t, append([]string{"lock", "watch", "cli:tls"}, tlsArgs...)...); r.code != exitUnavailable || !strings.Contains(r.stderr, "unauthenticated") {
		t.Fatalf("watch without a token = exit %d %q, want 3, unauthenticated", r.code, r.stderr)
	}

	// The SDK's watchdog renews over TLS with the token while `lock run` holds the lock: the
	// command outlives the first renewal (ttl/3) with a 3s lease's margin for a loaded host.
	r := cli(t, append(append([]string{"lock", "run", "cli:tls-run", "--ttl", "3s"}, authed...), "--", "sh", "-c", "sleep 1.5; echo $COORDKIT_FENCING_TOKEN")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) == "" {
		t.Fatalf("lock run over TLS = exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}
