// Package config reads coordkit's settings: command-line flags first, then COORDKIT_*
// environment variables for every flag left unset, then the flag's default.
//
// It works on github.com/spf13/pflag flag sets, the ones cobra commands carry: apply the
// fallbacks to the flags of the command that runs, after parsing, so that a variable meant
// for one command never reaches another.
package config

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// EnvPrefix is prepended to a flag's name to form its environment variable:
// --redis-addr reads COORDKIT_REDIS_ADDR.
const EnvPrefix = "COORDKIT_"

// EnvName returns the environment variable that backs the flag called name.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// noEnvAnnotation marks a flag that never reads the environment (see NoEnv).
const noEnvAnnotation = "coordkit_no_env"

// NoEnv marks the flag called name in fs as one that never falls back to its environment
// variable: for a flag whose variable means something else in the environments it runs in.
// It panics when fs has no such flag, a programming error.
func NoEnv(fs *pflag.FlagSet, name string) {
	if err := fs.SetAnnotation(name, noEnvAnnotation, []string{"true"}); err != nil {
		panic("config: " + err.Error())
	}
}

// hasEnv reports whether f falls back to its environment variable: not help and version
// (they ask for output, not settings), nor a flag marked with NoEnv.
func hasEnv(f *pflag.Flag) bool {
	if f.Name == "help" || f.Name == "version" {
		return false
	}
	_, marked := f.Annotations[noEnvAnnotation]
	return !marked
}

// ApplyEnv sets every flag of fs that was not given on the command line from its environment
// variable, when that variable is set. Call it after parsing. A bad value is an error naming
// both the variable and the flag, so a typo in a deployment never silently becomes a default.
func ApplyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || !hasEnv(f) {
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

// envNote is what AnnotateEnv appends to a flag's usage; its presence marks the flag done.
func envNote(name string) string { return " [$" + EnvName(name) + "]" }

// AnnotateEnv appends its environment variable to the usage text of every flag of fs, so that
// help shows where each setting may also come from. Flags already annotated are left alone:
// a flag shared by several sets is annotated once.
func AnnotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if hasEnv(f) && !strings.HasSuffix(f.Usage, envNote(f.Name)) {
			f.Usage += envNote(f.Name)
		}
	})
}
