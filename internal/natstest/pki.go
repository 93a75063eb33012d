package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// PKI is a test certificate authority and certificates it signed, as PEM
// files in a temporary directory: a server certificate for 127.0.0.1, a
// client certificate, and the faulty server certificates a client must
// refuse (for another name, expired).
type PKI struct {
	CA                      string // the CA's certificate
	ServerCert, ServerKey   string // for 127.0.0.1, valid now
	ClientCert, ClientKey   string // client authentication
	OtherNameCert, OtherKey string // for the name other.invalid only
	ExpiredCert, ExpiredKey string // for 127.0.0.1, expired an hour ago
}

// NewPKI makes a PKI under t.TempDir().
func NewPKI(t testing.TB) PKI {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("natstest: pki: %v", err)
		}
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		must(os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gttsplit test CA"},
		NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	caCert, err := x509.ParseCertificate(caDER)
	must(err)
	out := PKI{CA: write("ca.pem", "CERTIFICATE", caDER)}
	serial := int64(1)
	leaf := func(name string, usage x509.ExtKeyUsage, mod func(*x509.Certificate)) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		serial++
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		if mod != nil {
			mod(tmpl)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		must(err)
		kder, err := x509.MarshalECPrivateKey(key)
		must(err)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	out.ServerCert, out.ServerKey = leaf("server", x509.ExtKeyUsageServerAuth, nil)
	out.ClientCert, out.ClientKey = leaf("client", x509.ExtKeyUsageClientAuth, nil)
	out.OtherNameCert, out.OtherKey = leaf("other-name", x509.ExtKeyUsageServerAuth, func(c *x509.Certificate) {
		c.IPAddresses, c.DNSNames = nil, []string{"other.invalid"}
	})
	out.ExpiredCert, out.ExpiredKey = leaf("expired", x509.ExtKeyUsageServerAuth, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour)
	})
	return out
}

// StartTLS starts an embedded server (as Start) that speaks TLS only, with
// the certificate certFile and its key; with clientCA it also demands a
// client certificate that CA signed. It is shut down when the test ends.
func StartTLS(t testing.TB, certFile, keyFile, clientCA string) *server.Server {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: certFile, KeyFile: keyFile, CaFile: clientCA, Verify: clientCA != ""})
	if err != nil {
		t.Fatalf("natstest: tls config: %v", err)
	}
	opts := Options(t.TempDir(), 0)
	opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, clientCA != ""
	s, err := NewServerWithOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Shutdown(s) })
	return s
}
