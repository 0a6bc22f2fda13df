package diskimport

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// checksumPrefix is the only algorithm accepted: cloud images publish
// SHA256SUMS, and one algorithm keeps the API and the records simple.
const checksumPrefix = "sha256:"

// Checksum is a parsed "sha256:<hex>" checksum.
type Checksum [sha256.Size]byte

// String returns the checksum in its canonical form, lower-case hex.
func (c Checksum) String() string {
	return checksumPrefix + hex.EncodeToString(c[:])
}

// ParseChecksum parses "sha256:<64 hex digits>" (either case). It is the
// one validation of checksums, shared by the API's validation, the CLI
// flags and Import.
func ParseChecksum(s string) (Checksum, error) {
	var c Checksum
	digits, ok := strings.CutPrefix(s, checksumPrefix)
	if !ok || len(digits) != hex.EncodedLen(sha256.Size) {
		return c, fmt.Errorf("want sha256:<64 hex digits>, got %q", s)
	}
	if _, err := hex.Decode(c[:], []byte(digits)); err != nil {
		return c, fmt.Errorf("want sha256:<64 hex digits>, got %q", s)
	}
	return c, nil
}
