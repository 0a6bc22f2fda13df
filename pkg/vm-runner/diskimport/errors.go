package diskimport

import (
	"errors"
	"fmt"
)

// HTTPError is a response with a status other than 2xx.
type HTTPError struct {
	URL        string
	StatusCode int
	Status     string // as the server sent it, e.g. "404 Not Found"
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("GET %s: %s", e.URL, e.Status)
}

// ChecksumError is a source whose bytes as served do not have the
// expected checksum.
type ChecksumError struct {
	Source    string
	Want, Got string // "sha256:<hex>"
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s: checksum mismatch: want %s, got %s", e.Source, e.Want, e.Got)
}

// FormatError is an image that qemu-img probes as a format other than
// qcow2 or raw, or a qcow2 image that refers to other files.
type FormatError struct {
	Source string
	Format string // as qemu-img probed it
	Detail string // why it is refused
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: image format %s: %s", e.Source, e.Format, e.Detail)
}

// TooLargeError is an image whose virtual size exceeds the target's size,
// or whose data, staged, already ran past what such a target can hold
// (StagedBytes; VirtualSize is then unknown).
type TooLargeError struct {
	Source, Target string
	VirtualSize    int64
	StagedBytes    int64
	TargetSize     int64
}

func (e *TooLargeError) Error() string {
	if e.StagedBytes > 0 {
		return fmt.Sprintf("%s: the image's data runs past %d bytes, more than %s's size of %d bytes can hold; staging stopped",
			e.Source, e.StagedBytes-1, e.Target, e.TargetSize)
	}
	return fmt.Sprintf("%s: virtual size %d bytes exceeds %s's size of %d bytes",
		e.Source, e.VirtualSize, e.Target, e.TargetSize)
}

// Reason maps an error of Import to the reason of a status condition;
// "" for nil.
func Reason(err error) string {
	var (
		httpErr     *HTTPError
		checksumErr *ChecksumError
		tooLarge    *TooLargeError
		formatErr   *FormatError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &httpErr):
		return "HTTPError"
	case errors.As(err, &checksumErr):
		return "ChecksumMismatch"
	case errors.As(err, &tooLarge):
		return "ImageTooLarge"
	case errors.As(err, &formatErr):
		return "UnknownFormat"
	default:
		return "ImportFailed"
	}
}
