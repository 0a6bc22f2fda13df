package diskimport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// Source is where an image comes from: exactly one of URL, File and
// Reader.
type Source struct {
	URL    string    // http or https
	File   string    // a local path
	Reader io.Reader // e.g. an upload's stdin
	// Name, if not empty, names the source in errors and records in place
	// of its URL or File: a Reader's, e.g. "upload:debian.qcow2", or the
	// image whose disk File is a copy of; "reader" names a Reader without.
	Name string
	// Size is the Reader's size when known, the total of the download's
	// progress. A URL's comes from Content-Length, a File's from stat.
	Size int64
	// Checksum is "", "sha256:<hex>" or "sha512:<hex>" (ParseChecksum) of the
	// bytes as served, i.e. of the compressed file if it is compressed.
	Checksum string
}

// String names the source as errors and records do: its Name, else the
// URL or the file.
func (s Source) String() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.URL != "":
		return s.URL
	case s.File != "":
		return s.File
	default:
		return "reader"
	}
}

// Phase is a step of an import that reports progress.
type Phase string

const (
	// PhaseDownloading reads the source into the staging file; Done and
	// Total count the source's bytes as served.
	PhaseDownloading Phase = "Downloading"
	// PhaseConverting writes the staged image to the target; Done and Total
	// count bytes of the image's virtual size.
	PhaseConverting Phase = "Converting"
)

// Progress is a phase's progress; Total is 0 when unknown.
type Progress struct {
	Phase       Phase
	Done, Total int64
}

// Options are where and how Import works.
type Options struct {
	// Target is the block device (a regular file in tests) the raw disk is
	// written to. Its size is the limit of the image's virtual size.
	Target string
	// ScratchDir is where the source is staged: it needs room for the
	// image's data (the staging file is sparse). In a pod an emptyDir,
	// never the root file system.
	ScratchDir string
	// QemuImg is the qemu-img program; "qemu-img" when empty.
	QemuImg string
	// Progress, if not nil, is called about once a second and at the end
	// of each phase, on Import's goroutine.
	Progress func(Progress)
	// Client fetches a URL; when nil, a client with timeouts for dialling,
	// TLS and the response header but none overall: images are large.
	Client *http.Client
	// StallTimeout ends a download that has received nothing for this
	// long; 5 minutes when 0. With no overall timeout, a server or proxy
	// that stops sending would otherwise hold the VM's start forever.
	StallTimeout time.Duration
}

const defaultStallTimeout = 5 * time.Minute

// Result is what Import imported.
type Result struct {
	Format      string // "qcow2" or "raw", as qemu-img probed it
	VirtualSize int64  // the image's size as a disk
	SourceBytes int64  // bytes read from the source, as served
	SHA256      string // hex, of the bytes as served
}

// Import writes the image of src as a raw disk to opts.Target. The source
// is read once into a staging file in opts.ScratchDir, checked (checksum,
// format, size) and only then converted onto the target: an error before
// the conversion leaves the target untouched.
//
// Errors are *HTTPError, *ChecksumError, *FormatError, *TooLargeError or
// others; Reason maps them to a condition's reason. With an error, Result
// holds what was learnt before it (e.g. the SHA256 of a mismatch).
func Import(ctx context.Context, src Source, opts Options) (Result, error) {
	var res Result
	if err := src.validate(); err != nil {
		return res, err
	}
	var want *Checksum
	if src.Checksum != "" {
		c, err := ParseChecksum(src.Checksum)
		if err != nil {
			return res, fmt.Errorf("%s: checksum: %w", src, err)
		}
		want = &c
	}
	if opts.Target == "" {
		return res, errors.New("no target to import into")
	}
	if opts.ScratchDir == "" {
		return res, errors.New("no scratch directory to stage the image in")
	}
	qemuImg := opts.QemuImg
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	targetSize, err := deviceSize(opts.Target)
	if err != nil {
		return res, err
	}

	// Stage.
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = defaultStallTimeout
	}
	staging, err := os.CreateTemp(opts.ScratchDir, "import-*.img")
	if err != nil {
		return res, fmt.Errorf("staging file: %w", err)
	}
	defer os.Remove(staging.Name())
	r, size, err := src.open(ctx, opts.Client, stall)
	if err != nil {
		staging.Close()
		return res, err
	}
	st, err := stage(ctx, r, size, stagingLimit(targetSize), staging, want, opts.Progress)
	if errors.Is(err, errStagedTooLarge) {
		r.Close()
		staging.Close()
		return res, &TooLargeError{Source: src.String(), Target: opts.Target, StagedBytes: st.imageBytes, TargetSize: targetSize}
	}
	// The connection is not needed for the conversion.
	r.Close()
	if cerr := staging.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("%s: stage into %s: %w", src, staging.Name(), err)
	}
	res.SourceBytes = st.sourceBytes
	res.SHA256 = st.sha256
	// A source that ends early must not pass as a shorter image, whether or
	// not a checksum was given.
	if size > 0 && st.sourceBytes != size {
		return res, fmt.Errorf("%s: read %d bytes, want %d", src, st.sourceBytes, size)
	}
	if st.imageBytes == 0 {
		return res, fmt.Errorf("%s: the image is empty", src)
	}

	// Check, before anything touches the target.
	if want != nil && want.Hex != st.checksum {
		return res, &ChecksumError{Source: src.String(), Want: want.String(), Got: want.Algorithm + ":" + st.checksum}
	}
	if err := checkQcow2Header(staging.Name(), src.String()); err != nil {
		return res, err
	}
	info, err := qemuImgInfo(ctx, qemuImg, staging.Name())
	if err != nil {
		return res, err
	}
	res.Format = info.Format
	res.VirtualSize = info.VirtualSize
	if err := checkInfo(info, src.String()); err != nil {
		return res, err
	}
	if info.VirtualSize > targetSize {
		return res, &TooLargeError{Source: src.String(), Target: opts.Target,
			VirtualSize: info.VirtualSize, TargetSize: targetSize}
	}

	// Write.
	if err := qemuImgConvert(ctx, qemuImg, info.Format, staging.Name(), opts.Target, info.VirtualSize, opts.Progress); err != nil {
		return res, err
	}
	// qemu-img convert ends without flushing the target: the disk is only
	// safe to record as done once it has been synced.
	if err := syncFile(opts.Target); err != nil {
		return res, err
	}
	return res, nil
}

func (s Source) validate() error {
	n := 0
	for _, set := range []bool{s.URL != "", s.File != "", s.Reader != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("source: want exactly one of a URL, a file and a reader, got %d", n)
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("source %s: want an http or https URL", s.URL)
		}
	}
	return nil
}

// open returns the source's bytes and their size, 0 when unknown.
func (s Source) open(ctx context.Context, client *http.Client, stall time.Duration) (io.ReadCloser, int64, error) {
	switch {
	case s.URL != "":
		return openURL(ctx, client, s.URL, stall)
	case s.File != "":
		f, err := os.Open(s.File)
		if err != nil {
			return nil, 0, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, fi.Size(), nil
	default:
		return io.NopCloser(s.Reader), s.Size, nil
	}
}

func openURL(ctx context.Context, client *http.Client, u string, stall time.Duration) (io.ReadCloser, int64, error) {
	if client == nil {
		client = defaultClient
	}
	ctx, cancel := context.WithCancelCause(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel(nil)
		return nil, 0, err
	}
	// The checksum is of the file as served: Go's transport must not ask
	// for gzip on its own and then decompress it invisibly.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := client.Do(req)
	if err != nil {
		cancel(nil)
		return nil, 0, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body.Close()
		cancel(nil)
		return nil, 0, &HTTPError{URL: u, StatusCode: resp.StatusCode, Status: resp.Status}
	}
	body := &stallReader{ctx: ctx, cancel: cancel, r: resp.Body, timeout: stall}
	body.timer = time.AfterFunc(stall, func() {
		cancel(fmt.Errorf("GET %s: no data for %v", u, stall))
	})
	return body, max(resp.ContentLength, 0), nil
}

// stallReader cancels a response whose body has sent nothing for timeout.
type stallReader struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	r       io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.timeout)
	}
	if err != nil && !errors.Is(err, io.EOF) && context.Cause(s.ctx) != s.ctx.Err() { //nolint:errorlint // identity: a cause other than Err was given
		// Say that it stalled rather than that it was canceled.
		return n, context.Cause(s.ctx)
	}
	return n, err
}

func (s *stallReader) Close() error {
	s.timer.Stop()
	err := s.r.Close()
	s.cancel(nil)
	return err
}

// defaultClient has timeouts for every step up to the response header and
// none for the body: an image may take an hour to download.
var defaultClient = &http.Client{
	Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	},
}

// deviceSize is the size of a block device or a regular file: seeking to
// the end works for both, where stat gives a block device's size as 0.
func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", path, err)
	}
	return size, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// stagingLimit is the most an image for a target of targetSize may take
// staged: a raw image is at most the target's size, a qcow2 image its
// data plus its tables (well under 1/64 of it) and a header.
func stagingLimit(targetSize int64) int64 {
	return targetSize + targetSize/64 + 16<<20
}
