package diskimport

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

// checksumAlgorithms are the accepted algorithms: cloud images publish
// SHA256SUMS (Ubuntu, Fedora) or SHA512SUMS (Debian).
var checksumAlgorithms = map[string]func() hash.Hash{
	"sha256": sha256.New,
	"sha512": sha512.New,
}

// Checksum is a parsed "<algorithm>:<hex>" checksum.
type Checksum struct {
	// Algorithm is "sha256" or "sha512"; Hex the digest in lower case.
	Algorithm, Hex string
}

// String returns the checksum in its canonical form, lower-case hex.
func (c Checksum) String() string { return c.Algorithm + ":" + c.Hex }

// newHash is a hash of the checksum's algorithm.
func (c Checksum) newHash() hash.Hash { return checksumAlgorithms[c.Algorithm]() }

// ParseChecksum parses "sha256:<64 hex digits>" or "sha512:<128 hex
// digits>" (either case). It is the one validation of checksums, shared
// by the CLI flags and Import; the API's pattern says the same.
func ParseChecksum(s string) (Checksum, error) {
	bad := fmt.Errorf("want sha256:<64 hex digits> or sha512:<128 hex digits>, got %q", s)
	algorithm, digits, _ := strings.Cut(s, ":")
	h, ok := checksumAlgorithms[algorithm]
	if !ok || len(digits) != hex.EncodedLen(h().Size()) {
		return Checksum{}, bad
	}
	if _, err := hex.DecodeString(digits); err != nil {
		return Checksum{}, bad
	}
	return Checksum{Algorithm: algorithm, Hex: strings.ToLower(digits)}, nil
}
