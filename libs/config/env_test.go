package config

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseEnvFallback(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "default", want: "127.0.0.1:8080"},
		{name: "env", env: map[string]string{"COORDKIT_LISTEN_ADDR": ":9"}, want: ":9"},
		{name: "flag beats env", args: []string{"--listen-addr", ":7"}, env: map[string]string{"COORDKIT_LISTEN_ADDR": ":9"}, want: ":7"},
		{name: "bad env value", env: map[string]string{"COORDKIT_COUNT": "many"}, wantErr: "COORDKIT_COUNT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			addr := fs.String("listen-addr", "127.0.0.1:8080", "")
			fs.Int("count", 1, "")
			err := Parse(fs, tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if *addr != tt.want {
				t.Fatalf("listen-addr = %q, want %q", *addr, tt.want)
			}
		})
	}
}
