package config

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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
		{name: "flag beats bad env", args: []string{"--count", "2"}, env: map[string]string{"COORDKIT_COUNT": "many"}, want: "127.0.0.1:8080"},
		{name: "bad env value", env: map[string]string{"COORDKIT_COUNT": "many"}, wantErr: "COORDKIT_COUNT"},
		{name: "help never from env", env: map[string]string{"COORDKIT_HELP": "true"}, want: "127.0.0.1:8080"},
		{name: "a NoEnv flag never from env", env: map[string]string{"COORDKIT_FENCING_TOKEN": "not a number"}, want: "127.0.0.1:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			addr := fs.String("listen-addr", "127.0.0.1:8080", "")
			fs.Int("count", 1, "")
			help := fs.Bool("help", false, "")
			fs.Int("fencing-token", 0, "")
			NoEnv(fs, "fencing-token")
			err := fs.Parse(tt.args)
			if err == nil {
				err = ApplyEnv(fs)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if *addr != tt.want || *help {
				t.Fatalf("listen-addr = %q, help = %v; want %q, false", *addr, *help, tt.want)
			}
		})
	}
}

func TestAnnotateEnvOnce(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("redis-addr", "", "Redis host:port")
	fs.Bool("help", false, "help")
	AnnotateEnv(fs)
	AnnotateEnv(fs)
	if got := fs.Lookup("redis-addr").Usage; got != "Redis host:port [$COORDKIT_REDIS_ADDR]" {
		t.Fatalf("usage = %q, want the variable appended once", got)
	}
	if got := fs.Lookup("help").Usage; got != "help" {
		t.Fatalf("help usage = %q, want no variable", got)
	}
}
