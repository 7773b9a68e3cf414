package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/coordkit/coordkit/libs/client"
)

// defaultServer is the base URL every client command calls unless told otherwise: `coord
// serve`'s default address.
const defaultServer = "http://127.0.0.1:8080"

// clientFlags are the flags every command of a client group (lock, id, task) shares.
type clientFlags struct {
	server   string
	token    string
	caFile   string
	certFile string
	keyFile  string
	asJSON   bool
	timeout  time.Duration
	backend  string
}

// register adds the flags to cmd as persistent flags, so that each subcommand has them;
// withBackend adds --backend, whose help names what.
func (f *clientFlags) register(cmd *cobra.Command, backendOf string) {
	fs := cmd.PersistentFlags()
	fs.StringVar(&f.server, "server", defaultServer, "base URL of a coordkit service (https:// for TLS)")
	fs.StringVar(&f.token, "token", "", "bearer token sent with every call, for a service with auth")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM file of the CA that signed the service's certificate, instead of the system's")
	fs.StringVar(&f.certFile, "cert-file", "", "PEM client certificate, for a service that wants one (mutual TLS); needs --key-file")
	fs.StringVar(&f.keyFile, "key-file", "", "PEM private key of --cert-file")
	fs.BoolVar(&f.asJSON, "json", false, "print the API's JSON response; errors as JSON on stderr")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "deadline for the call, on top of any --wait")
	if backendOf != "" {
		fs.StringVar(&f.backend, "backend", "", backendOf+" backend; empty means the service's default")
	}
}

// options turns the flags into SDK client options; a TLS file that cannot be used is a usage
// error.
func (f *clientFlags) options() ([]client.Option, error) {
	opts := []client.Option{client.WithToken(f.token), client.WithBackend(f.backend)}
	if f.caFile != "" || f.certFile != "" || f.keyFile != "" {
		cfg, err := client.LoadTLSConfig(f.caFile, f.certFile, f.keyFile)
		if err != nil {
			return nil, usageErr(nil, fmt.Errorf("--ca-file, --cert-file, --key-file: %w", err))
		}
		opts = append(opts, client.WithTLSConfig(cfg))
	}
	return opts, nil
}

// client returns an SDK client for --server with the flags' TLS settings and token.
func (f *clientFlags) client() (*client.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	return client.New(f.server, opts...), nil
}

// callContext bounds one call by --timeout plus extra (a server-side wait).
func (f *clientFlags) callContext(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.timeout+extra)
}

// printJSON prints m as the API's JSON, on one line: the options of Connect's JSON codec, so
// unset fields are left out rather than printed as null.
func printJSON(w io.Writer, m proto.Message) error {
	out, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	// protojson puts a space after some commas in some builds only (on purpose, against
	// byte comparisons); scripts grep this line, so it is compacted to one stable form.
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil {
		return fmt.Errorf("json: %w", err)
	}
	_, err = fmt.Fprintln(w, compact.String())
	return err
}
