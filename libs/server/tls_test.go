package server_test

import (
	"crypto/tls"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/libs/server"
	"github.com/coordkit/coordkit/libs/testenv"
)

// httpsClient trusts certs' authority, presents client when set, and speaks HTTP/2 (or only
// HTTP/1.1 when h1).
func httpsClient(certs *testenv.TLSCerts, client *tls.Certificate, h1 bool) *http.Client {
	cfg := certs.ClientConfig()
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	p := new(http.Protocols)
	if h1 {
		p.SetHTTP1(true)
	} else {
		p.SetHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: p}}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	tlsFiles, err := server.LoadTLS(certs.CertFile, certs.KeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, _ := edgeServer(t, server.Config{TLS: tlsFiles}, 0)

	for _, h1 := range []bool{false, true} {
		res, err := httpsClient(certs, nil, h1).Get("https://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("HTTPS (HTTP/1.1 only: %v): %v", h1, err)
		}
		res.Body.Close()
		if want := map[bool]int{false: 2, true: 1}[h1]; res.ProtoMajor != want || res.TLS == nil {
			t.Errorf("HTTPS (HTTP/1.1 only: %v) spoke HTTP/%d (TLS %v), want HTTP/%d over TLS", h1, res.ProtoMajor, res.TLS != nil, want)
		}
	}
	if code := call(t, httpsClient(certs, nil, false), "https://"+addr, unaryProc, ""); code != 0 {
		t.Errorf("RPC over HTTPS = %v, want ok", code)
	}
	// No cleartext on a TLS port: neither h2c nor HTTP/1.1.
	if _, err := h2cClient().Get("http://" + addr + "/healthz"); err == nil {
		t.Error("h2c request to the TLS port succeeded")
	}
	if res, err := http.Get("http://" + addr + "/healthz"); err == nil && res.StatusCode == http.StatusOK {
		t.Error("cleartext HTTP/1.1 request to the TLS port succeeded")
	}
	// A client that does not trust the authority refuses the server.
	if _, err := http.Get("https://" + addr + "/healthz"); err == nil {
		t.Error("a client trusting only the system roots accepted the test certificate")
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	other := testenv.NewTLSCerts(t) // another authority: its certificates must be refused
	tlsFiles, err := server.LoadTLS(certs.CertFile, certs.KeyFile, certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, _ := edgeServer(t, server.Config{TLS: tlsFiles}, 0)
	url := "https://" + addr + "/healthz"
	// The test certificate is good for client auth too: it stands for a client's.
	signed, err := tls.LoadX509KeyPair(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.LoadX509KeyPair(other.CertFile, other.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		client *tls.Certificate
		ok     bool
	}{
		{name: "signed client certificate", client: &signed, ok: true},
		{name: "no client certificate"},
		{name: "certificate of another authority", client: &foreign},
	}
	for _, tt := range tests {
		for _, h1 := range []bool{false, true} {
			res, err := httpsClient(certs, tt.client, h1).Get(url)
			if err == nil {
				res.Body.Close()
			}
			if (err == nil) != tt.ok {
				t.Errorf("%s (HTTP/1.1 only: %v): err = %v, want success %v", tt.name, h1, err, tt.ok)
			}
		}
	}
}

func TestTLSReload(t *testing.T) {
	t.Parallel()
	first, second := testenv.NewTLSCerts(t), testenv.NewTLSCerts(t)
	dir := t.TempDir()
	cert, key := dir+"/cert.pem", dir+"/key.pem"
	copyFile(t, first.CertFile, cert)
	copyFile(t, first.KeyFile, key)
	tlsFiles, err := server.LoadTLS(cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	srv, addr, _, _ := edgeServer(t, server.Config{TLS: tlsFiles}, 0)
	get := func(certs *testenv.TLSCerts) error {
		res, err := httpsClient(certs, nil, true).Get("https://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err
	}
	if err := get(first); err != nil {
		t.Fatalf("before reload: %v", err)
	}
	// A broken file keeps the certificate in force.
	writeFile(t, dir, "cert.pem", "not a certificate", 0o600)
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), "TLS certificate") {
		t.Fatalf("reload of a broken certificate = %v, want an error", err)
	}
	if err := get(first); err != nil {
		t.Fatalf("after a failed reload: %v", err)
	}
	copyFile(t, second.CertFile, cert)
	copyFile(t, second.KeyFile, key)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := get(second); err != nil {
		t.Fatalf("after reload, a client trusting the new authority: %v", err)
	}
	if err := get(first); err == nil {
		t.Fatal("after reload, the server still presents the old certificate")
	}
}

func TestLoadTLSErrors(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	bad := writeFile(t, t.TempDir(), "bad.pem", "junk", 0o600)
	tests := []struct {
		name, cert, key, ca, want string
	}{
		{name: "no key", cert: certs.CertFile, want: "both"},
		{name: "missing cert", cert: "/nonexistent.pem", key: certs.KeyFile, want: "TLS certificate"},
		{name: "key of another cert", cert: certs.CertFile, key: bad, want: "TLS certificate"},
		{name: "client CA without PEM", cert: certs.CertFile, key: certs.KeyFile, ca: bad, want: "no PEM"},
		{name: "missing client CA", cert: certs.CertFile, key: certs.KeyFile, ca: "/nonexistent.pem", want: "client CA"},
	}
	for _, tt := range tests {
		if _, err := server.LoadTLS(tt.cert, tt.key, tt.ca); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: LoadTLS = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLSRefusesCBCSuites: a TLS 1.2 client offering only CBC suites (ECDHE-RSA-AES128-SHA,
// ECDHE-ECDSA-AES128-SHA and the rest of Go's CBC list) is refused at the handshake; one
// offering an AEAD suite is served.
func TestTLSRefusesCBCSuites(t *testing.T) {
	t.Parallel()
	certs := testenv.NewTLSCerts(t)
	tlsFiles, err := server.LoadTLS(certs.CertFile, certs.KeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _, _ := edgeServer(t, server.Config{TLS: tlsFiles}, 0)
	var cbc []uint16
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		if strings.Contains(s.Name, "_CBC_") && slices.Contains(s.SupportedVersions, tls.VersionTLS12) {
			cbc = append(cbc, s.ID)
		}
	}
	if !slices.Contains(cbc, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA) || !slices.Contains(cbc, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA) {
		t.Fatalf("the CBC list lacks ECDHE-RSA-AES128-SHA or ECDHE-ECDSA-AES128-SHA: %v", cbc)
	}
	dial := func(suites []uint16) (*tls.ConnectionState, error) {
		cfg := certs.ClientConfig()
		cfg.MaxVersion, cfg.CipherSuites = tls.VersionTLS12, suites
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		st := c.ConnectionState()
		return &st, nil
	}
	if st, err := dial(cbc); err == nil {
		t.Fatalf("a TLS 1.2 client offering only CBC suites was served with %s", tls.CipherSuiteName(st.CipherSuite))
	}
	for _, id := range []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA} {
		if st, err := dial([]uint16{id}); err == nil {
			t.Fatalf("a client offering only %s was served with %s", tls.CipherSuiteName(id), tls.CipherSuiteName(st.CipherSuite))
		}
	}
	st, err := dial([]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256})
	if err != nil {
		t.Fatalf("a TLS 1.2 client offering ECDHE-ECDSA-AES128-GCM-SHA256: %v", err)
	}
	if st.Version != tls.VersionTLS12 || !slices.Contains(server.CipherSuites, st.CipherSuite) {
		t.Fatalf("served TLS %x with %s, want TLS 1.2 with an AEAD suite", st.Version, tls.CipherSuiteName(st.CipherSuite))
	}
}
