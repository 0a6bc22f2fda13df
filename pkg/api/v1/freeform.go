package v1

import (
	"bytes"
	"encoding/json"
)

// FreeForm is a JSON value kept as it was written, for content that vmop
// passes on without a schema (cloud-init documents, the guest's OS info).
type FreeForm struct {
	Raw json.RawMessage `json:"-"`
}

// MarshalJSON writes the value unchanged.
func (f FreeForm) MarshalJSON() ([]byte, error) {
	if len(f.Raw) == 0 {
		return []byte("null"), nil
	}
	return f.Raw, nil
}

// UnmarshalJSON keeps a copy of the value.
func (f *FreeForm) UnmarshalJSON(b []byte) error {
	f.Raw = append(f.Raw[:0], b...)
	return nil
}

// IsNull tells whether there is no value.
func (f *FreeForm) IsNull() bool {
	return f == nil || len(f.Raw) == 0 || bytes.Equal(f.Raw, []byte("null"))
}

// Map decodes the value as an object; ok is false when it is not one.
func (f *FreeForm) Map() (m map[string]any, ok bool) {
	if f.IsNull() {
		return nil, false
	}
	if err := f.Decode(&m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

// Decode decodes the value into v, numbers as json.Number so that large
// integers stay exact.
func (f *FreeForm) Decode(v any) error {
	d := json.NewDecoder(bytes.NewReader(f.Raw))
	d.UseNumber()
	return d.Decode(v)
}
