// Package config reads coordkit's settings: command-line flags first, then COORDKIT_*
// environment variables for every flag left unset, then the flag's default.
package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvPrefix is prepended to a flag's name to form its environment variable:
// --redis-addr reads COORDKIT_REDIS_ADDR.
const EnvPrefix = "COORDKIT_"

// EnvName returns the environment variable that backs the flag called name.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ApplyEnv sets every flag of fs that was not given on the command line from its environment
// variable, when that variable is set. Call it after fs.Parse. A bad value is an error naming
// both the variable and the flag, so a typo in a deployment never silently becomes a default.
func ApplyEnv(fs *flag.FlagSet) error {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		v, ok := os.LookupEnv(EnvName(f.Name))
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("config: %s=%q (flag --%s): %w", EnvName(f.Name), v, f.Name, e)
		}
	})
	return err
}

// Parse parses args into fs and then applies the environment fallbacks.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return ApplyEnv(fs)
}

// Usage returns a flag.FlagSet usage function that lists each flag with its environment
// variable.
func Usage(fs *flag.FlagSet, synopsis string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\nflags (each falls back to its environment variable):\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %q)", f.DefValue)
			}
			fmt.Fprintf(w, "  --%s  [$%s]%s\n      %s\n", f.Name, EnvName(f.Name), def, f.Usage)
		})
	}
}
