package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLS is a server certificate, and optionally the CAs that client certificates must chain
// to (mutual TLS), loaded from PEM files and reloadable while the server runs: handshakes
// after a Reload use the new files. The zero value is unusable; use LoadTLS.
type TLS struct {
	certFile, keyFile, clientCAFile string
	state                           atomic.Pointer[tlsState]
}

type tlsState struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool // nil: no client certificate asked for
}

// LoadTLS loads the certificate chain certFile with its key keyFile, and when clientCAFile
// is set the CA bundle that every client's certificate must be signed by: clients without
// one are refused at the handshake.
func LoadTLS(certFile, keyFile, clientCAFile string) (*TLS, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	t := &TLS{certFile: certFile, keyFile: keyFile, clientCAFile: clientCAFile}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the files again and, only when they are all valid, uses them for the
// following handshakes: bad files keep the ones in force and return the error.
func (t *TLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return fmt.Errorf("server: TLS certificate %s, key %s: %w", t.certFile, t.keyFile, err)
	}
	st := &tlsState{cert: &cert}
	if t.clientCAFile != "" {
		pem, err := os.ReadFile(t.clientCAFile)
		if err != nil {
			return fmt.Errorf("server: TLS client CA: %w", err)
		}
		st.clientCAs = x509.NewCertPool()
		if !st.clientCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("server: TLS client CA %s holds no PEM certificate", t.clientCAFile)
		}
	}
	t.state.Store(st)
	return nil
}

// MutualTLS says whether clients must present a certificate.
func (t *TLS) MutualTLS() bool { return t.clientCAFile != "" }

// CipherSuites are the TLS 1.2 suites served: ECDHE key exchange (forward secrecy) with an
// AEAD cipher (AES-GCM or ChaCha20-Poly1305), as Mozilla's "intermediate" profile. The CBC
// suites Go would otherwise offer (ECDHE-RSA-AES128-SHA and kin) use MAC-then-encrypt, the
// construction of Lucky13 and POODLE-style padding oracles, and are refused. TLS 1.3's
// suites are all AEAD and not configurable.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Config is the tls.Config to serve with: TLS 1.2 at least, with AEAD suites only (see
// CipherSuites), HTTP/2 and HTTP/1.1 offered by ALPN, and each handshake taking the files
// loaded last.
func (t *TLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: CipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := t.state.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				CipherSuites: CipherSuites,
				NextProtos:   []string{"h2", "http/1.1"},
				Certificates: []tls.Certificate{*st.cert},
			}
			if st.clientCAs != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = st.clientCAs
			}
			return c, nil
		},
	}
}
