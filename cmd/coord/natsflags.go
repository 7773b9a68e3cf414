package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	flag "github.com/spf13/pflag"

	"github.com/coordkit/coordkit/libs/event"
	"github.com/coordkit/coordkit/libs/server"
)

// natsFlags is how `coord serve` authenticates on NATS and signs its events.
type natsFlags struct {
	usersFile string // the embedded server's users (--nats-listen)
	user      string
	password  string
	creds     string
	nkey      string
	caFile    string
	certFile  string
	keyFile   string
	eventsKey string
	serveTLS  *server.TLS // the serve certificate, set by newServer when TLS is on
}

// The files generated in --data-dir for an embedded server that listens.
const (
	natsUsersFileName = "nats-users"
	eventsKeyFileName = "events.key"
)

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.usersFile, "nats-users-file", "", "with --nats-listen: file of the embedded NATS server's users, \"publisher USER PASSWORD\" (other coord instances) and \"subscriber USER PASSWORD\" (outside readers, subscribe-only on coordkit.>); default <data-dir>/"+natsUsersFileName+", generated (0600) when missing")
	fs.StringVar(&n.user, "nats-user", "", "user to log in to --nats-url as (with --nats-password)")
	fs.StringVar(&n.password, "nats-password", "", "password of --nats-user; prefer the environment variable to the command line")
	fs.StringVar(&n.creds, "nats-creds", "", "NATS .creds file (user JWT and nkey seed) to log in to --nats-url with")
	fs.StringVar(&n.nkey, "nats-nkey", "", "NATS nkey seed file to log in to --nats-url with")
	fs.StringVar(&n.caFile, "nats-ca", "", "PEM file of the CAs that sign --nats-url's TLS certificate; default the system's roots")
	fs.StringVar(&n.certFile, "nats-cert", "", "PEM client certificate for --nats-url (with --nats-key)")
	fs.StringVar(&n.keyFile, "nats-key", "", "PEM private key of --nats-cert")
	fs.StringVar(&n.eventsKey, "events-key-file", "", "file of the key (16 bytes or more) that signs every event with HMAC-SHA256; events not signed with it are ignored. Every instance on one NATS needs the same file. Default with --nats-listen: <data-dir>/"+eventsKeyFileName+", generated (0600) when missing")
}

// eventConfig is the event.Config of cfg: the embedded server's users, TLS and events key,
// read or generated into the data directory, or the login to an outside NATS. It logs where
// each file is, never what is in it.
func (n *natsFlags) eventConfig(cfg serveConfig, srv *server.Server, logger *slog.Logger) (event.Config, error) {
	ecfg := event.Config{URL: cfg.natsURL, Listen: cfg.natsListen, Logger: logger, Registerer: srv.Registry()}
	client := n.user != "" || n.password != "" || n.creds != "" || n.nkey != "" || n.caFile != "" || n.certFile != "" || n.keyFile != ""
	switch {
	case cfg.natsURL != "" && cfg.natsListen != "":
		return ecfg, errors.New("--nats-listen: it is for the embedded server, which --nats-url replaces")
	case cfg.natsURL == "" && client:
		return ecfg, errors.New("--nats-user/--nats-password/--nats-creds/--nats-nkey/--nats-ca/--nats-cert/--nats-key: they log in to --nats-url, which is not set")
	case cfg.natsListen == "" && n.usersFile != "":
		return ecfg, errors.New("--nats-users-file: it is for the embedded server's --nats-listen, which is not set")
	}
	if cfg.natsURL != "" {
		ecfg.User, ecfg.Password, ecfg.CredsFile, ecfg.NKeyFile = n.user, n.password, n.creds, n.nkey
		t, err := n.clientTLS()
		if err != nil {
			return ecfg, err
		}
		ecfg.TLS = t
	}
	keyFile := n.eventsKey
	if cfg.natsListen != "" {
		if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
			return ecfg, fmt.Errorf("--data-dir: %w", err)
		}
		n.usersFile = cmp.Or(n.usersFile, filepath.Join(cfg.dataDir, natsUsersFileName))
		auth, created, err := event.LoadOrCreateAuth(n.usersFile)
		if err != nil {
			return ecfg, fmt.Errorf("--nats-users-file: %w", err)
		}
		if created {
			logger.Info("generated the embedded NATS server's users (publisher for coord instances, subscriber for readers)", "file", n.usersFile)
		}
		warnReadable(logger, "--nats-users-file", n.usersFile)
		ecfg.Auth = auth
		if n.serveTLS != nil {
			ecfg.ListenTLS = n.serveTLS.Config()
		}
		keyFile = cmp.Or(keyFile, filepath.Join(cfg.dataDir, eventsKeyFileName))
	}
	if keyFile == "" {
		return ecfg, nil
	}
	var key []byte
	var err error
	if n.eventsKey == "" {
		var created bool
		if key, created, err = event.LoadOrCreateKeyFile(keyFile); err == nil && created {
			logger.Info("generated the events key; give other instances a copy with --events-key-file", "file", keyFile)
		}
	} else {
		key, err = event.LoadKeyFile(keyFile)
	}
	if err != nil {
		return ecfg, fmt.Errorf("--events-key-file: %w", err)
	}
	ecfg.Key = key
	warnReadable(logger, "--events-key-file", keyFile)
	logger.Info("events are signed and checked", "key_file", keyFile)
	return ecfg, nil
}

// warnReadable warns when the secret file at path is readable by every user of the machine,
// as the tokens file does: the NATS passwords and the events key let whoever reads them
// publish events the instances act on.
func warnReadable(logger *slog.Logger, flag, path string) {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o004 != 0 {
		logger.Warn(flag+" file is readable by every user: chmod 600 it", "path", path, "mode", st.Mode().Perm())
	}
}

// clientTLS is the TLS configuration for --nats-url from --nats-ca/--nats-cert/--nats-key,
// or nil when none is given.
func (n *natsFlags) clientTLS() (*tls.Config, error) {
	if n.caFile == "" && n.certFile == "" && n.keyFile == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if n.caFile != "" {
		pem, err := os.ReadFile(n.caFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-ca: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--nats-ca: no PEM certificate in %s", n.caFile)
		}
	}
	if (n.certFile == "") != (n.keyFile == "") {
		return nil, errors.New("--nats-cert/--nats-key: give both or neither")
	}
	if n.certFile != "" {
		c, err := tls.LoadX509KeyPair(n.certFile, n.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-cert/--nats-key: %w", err)
		}
		t.Certificates = []tls.Certificate{c}
	}
	return t, nil
}
