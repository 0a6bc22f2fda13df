package v1

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Quantity is a memory size as written in the manifest ("8Gi", "1G" or a
// plain number of bytes). It stays text until validated so that a bad value
// becomes a field error listed with all others, not a decode failure.
type Quantity string

// UnmarshalJSON accepts a string or a number.
func (q *Quantity) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*q = Quantity(s)
		return nil
	}
	if bytes.Equal(b, []byte("null")) {
		*q = ""
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("a quantity must be a string or a number, not %s", b)
	}
	*q = Quantity(n)
	return nil
}

// FormatBytes writes a size as the runner reports memory (e.g. 4Gi).
func FormatBytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}

// Parse returns the quantity's value.
func (q Quantity) Parse() (resource.Quantity, error) {
	return resource.ParseQuantity(string(q))
}

// Bytes returns the size in bytes; it is 0 for a value that does not parse,
// which validation reports.
func (q Quantity) Bytes() int64 {
	v, err := q.Parse()
	if err != nil {
		return 0
	}
	return v.Value()
}
