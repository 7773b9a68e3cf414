package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is coord's version; the build sets it with -ldflags "-X main.version=v1.2.3", else
// it is the module version of the build (v1.2.3 for `go install ...@v1.2.3`, (devel) for a
// build in a checkout).
var version string

// versionString is what `coord version` and `coord --version` print: the version, the VCS
// revision and time the binary was built from (when the build recorded them), and the Go
// version.
func versionString() string {
	v := version
	info, ok := debug.ReadBuildInfo()
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	parts := []string{"coord " + v}
	if ok {
		var rev, at, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			parts = append(parts, "commit "+rev+dirty)
		}
		if at != "" {
			parts = append(parts, "built from "+at)
		}
	}
	return strings.Join(append(parts, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH), ", ")
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print coord's version, commit and Go version",
		Args:  argsExactly(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}
