package taskpickservice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/client/gen/coordkit/taskpick/v1/taskpickv1connect"
	"github.com/coordkit/coordkit/libs/service"
	"github.com/coordkit/coordkit/libs/testenv"
	"github.com/coordkit/coordkit/services/taskpick/taskpickservice"
)

func TestOpenBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name         string
		deps         service.Deps
		cfg          taskpickservice.Config
		backends     string
		def          string
		wantErrNamed string
	}{
		{name: "embedded only", backends: "sqlite", def: "sqlite"},
		{name: "shared redis", deps: service.Deps{Redis: testenv.Redis(t, "")}, backends: "redis,sqlite", def: "redis"},
		{name: "default named", deps: service.Deps{Redis: testenv.Redis(t, "")}, cfg: taskpickservice.Config{Default: "sqlite"},
			backends: "redis,sqlite", def: "sqlite"},
		// An invalid setting refused at the SQLite open shows the service passes Deps' setting.
		{name: "sqlite synchronous from deps", deps: service.Deps{SQLiteSynchronous: "off"}, wantErrNamed: "--data-dir"},
		{name: "unknown default", cfg: taskpickservice.Config{Default: "etcd"}, wantErrNamed: "--task-default-backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.deps.DataDir = t.TempDir()
			m, err := taskpickservice.Open(ctx, tt.deps, tt.cfg)
			if tt.wantErrNamed != "" {
				if err == nil {
					m.Close()
					t.Fatalf("Open succeeded, want an error naming %s", tt.wantErrNamed)
				}
				if !strings.Contains(err.Error(), tt.wantErrNamed) {
					t.Fatalf("Open error = %v, want one naming %s", err, tt.wantErrNamed)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if m.Path != "/"+taskpickv1connect.TaskPickServiceName+"/" {
				t.Fatalf("mounted at %q, want /%s/", m.Path, taskpickv1connect.TaskPickServiceName)
			}
			if m.Summary[1] != tt.backends || m.Summary[3] != tt.def {
				t.Fatalf("summary = %v, want backends %s, default %s", m.Summary, tt.backends, tt.def)
			}
			for name, check := range m.Checks {
				if err := check(ctx); err != nil {
					t.Fatalf("health check %s: %v", name, err)
				}
			}
			if err := m.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}
