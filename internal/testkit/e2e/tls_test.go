package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetrun/jetrun/internal/testkit/natstest"
)

// A nats-server that speaks only TLS and verifies clients: child-worker,
// parent-worker and the CLI take a CA, a certificate and a key, and a run
// goes through its whole lifecycle; a client without a certificate is
// refused.
func TestLifecycleOverMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := newTestPKI(t, dir)
	port := natstest.FreePort(t)
	conf := filepath.Join(dir, "tls.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
listen: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 1GB }
tls {
  cert_file: %q
  key_file:  %q
  ca_file:   %q
  verify:    true
  timeout:   5
}
`, port, filepath.Join(dir, "js"), pki.serverCert, pki.serverKey, pki.ca)), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, "nats-server", nil, "-c", conf)
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	tlsEnv := map[string]string{
		"JETRUN_NATS_URL": url, "JETRUN_NATS_TLS_CA": pki.ca,
		"JETRUN_NATS_TLS_CERT": pki.clientCert, "JETRUN_NATS_TLS_KEY": pki.clientKey,
	}
	natstest.Eventually(t, 20*time.Second, func() bool {
		nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey))
		if err == nil {
			nc.Close()
		}
		return err == nil
	}, "the TLS nats-server did not come up")

	// Without a client certificate the server refuses the connection.
	if nc, err := nats.Connect(url, nats.RootCAs(pki.ca), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate was let in")
	}

	child := start(t, "child-worker", tlsEnv)
	child.waitLog("child-worker serving", 60*time.Second)
	pw := start(t, "parent-worker", merge(tlsEnv, map[string]string{"JETRUN_HTTP_ADDR": ""}))
	pw.waitLog("parent-worker ready", 60*time.Second)

	cmd := exec.Command(filepath.Join(bin, "jetrun"), "dispatch", "--wait", "--run-id", "tls-1", "demo", `{"steps":3,"stepMs":20}`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range tlsEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "completed") {
		t.Fatalf("jetrun dispatch --wait over TLS: %v\n%s", err, out)
	}
	key, err := os.ReadFile(pki.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.Split(strings.TrimSpace(string(key)), "\n")[1] // a line of the key itself
	for _, p := range []*proc{child, pw} {
		if logs := p.stderr.String() + p.stdout.String(); strings.Contains(logs, secret) {
			t.Errorf("%s logged its private key", p.name)
		}
	}
}

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jetrun test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) (cert, key string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(cn+".pem", "CERTIFICATE", der), write(cn+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := testPKI{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = issue(2, "server", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.clientCert, p.clientKey = issue(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return p
}
