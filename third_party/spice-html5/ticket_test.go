package spicehtml5_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // SPICE's ticket is RSA-OAEP with SHA-1
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/headless"
	spicehtml5 "github.com/vmop/vmop/third_party/spice-html5"
)

// page imports the client's ticket module and encrypts a password n times
// with the server's public key (DER), as the client does on each channel's
// link.
const page = `<!doctype html><script type="module">
import { create_rsa_from_mb, rsa_encrypt } from './src/ticket.js';
window.encrypt = (der, password, n) => {
  const key = create_rsa_from_mb(new Uint8Array(der).buffer, 0);
  const out = [];
  for (let i = 0; i < n; i++) out.push(rsa_encrypt(key, password + String.fromCharCode(0)));
  return out;
};
window.ready = true;
</script>`

// TestTicketEncryption: every ticket the client sends decrypts to the
// password. Upstream's rsa_encrypt drops the ciphertext's leading zero
// bytes, which the server then reads shifted: about one link in 200 was
// refused with a right password (patches/).
func TestTicketEncryption(t *testing.T) {
	browser := headless.Start(t)
	mux := http.NewServeMux()
	mux.Handle("GET /src/", http.FileServerFS(spicehtml5.Files))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// SPICE's key: 1024 bits (SPICE_TICKET_KEY_PAIR_LENGTH).
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	require.NoError(t, err)
	ints := make([]int, len(der))
	for i, b := range der {
		ints[i] = int(b)
	}

	const password, n = "one-time", 3000
	tab, _ := headless.Tab(t, browser)
	_, err = chromedp.Run(tab, chromedp.Navigate(srv.URL+"/"))
	require.NoError(t, err)
	_, err = chromedp.Run(tab, chromedp.Poll[bool]("window.ready === true"))
	require.NoError(t, err)
	args, err := json.Marshal([]any{ints, password, n})
	require.NoError(t, err)
	tickets, err := chromedp.Run(tab, chromedp.Evaluate[[][]int]("window.encrypt(..."+string(args)+")"))
	require.NoError(t, err)
	require.Len(t, tickets, n)
	bad := 0
	for _, ticket := range tickets {
		b := make([]byte, len(ticket))
		for i, v := range ticket {
			b[i] = byte(v)
		}
		got, err := rsa.DecryptOAEP(sha1.New(), nil, key, b, nil)
		if len(b) != key.Size() || err != nil || string(got) != password+"\x00" {
			bad++
		}
	}
	require.Zero(t, bad, "tickets of %d that do not decrypt to the password", n)
}
