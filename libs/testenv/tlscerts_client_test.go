package testenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/client"
	"github.com/coordkit/coordkit/libs/testenv"
)

// TestLoadTLSConfig: a CA file is trusted instead of the system's roots, and every file that
// cannot be used is an error naming what is wrong. The client side against a real TLS server
// with tokens is tested through the CLI (cmd/coord TestCLITLSAndToken). The test lives beside
// NewTLSCerts so that the SDK module (libs/client) needs nothing of the test environment's.
func TestLoadTLSConfig(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                string
		ca, cert, key, want string
	}{
		{name: "system roots"},
		{name: "CA file", ca: certs.CAFile},
		{name: "client certificate", ca: certs.CAFile, cert: certs.CertFile, key: certs.KeyFile},
		{name: "missing CA file", ca: filepath.Join(t.TempDir(), "nope"), want: "CA file"},
		{name: "CA file not PEM", ca: notPEM, want: "no PEM certificate"},
		{name: "certificate without key", cert: certs.CertFile, want: "both"},
		{name: "key not matching", cert: certs.CertFile, key: notPEM, want: "client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := client.LoadTLSConfig(tt.ca, tt.cert, tt.key)
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("LoadTLSConfig = %v, want an error with %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.RootCAs != nil) != (tt.ca != "") || len(cfg.Certificates) != map[bool]int{true: 1}[tt.cert != ""] {
				t.Fatalf("config = roots %v, %d certificates; want roots only with a CA file, a certificate only when given", cfg.RootCAs != nil, len(cfg.Certificates))
			}
		})
	}
}
