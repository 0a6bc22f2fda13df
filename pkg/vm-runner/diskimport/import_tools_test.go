package diskimport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/vmop/vmop/test/harness/prereq"
)

const (
	testImageSize  = 16 << 20
	testTargetSize = 32 << 20
)

func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	prereq.Commands(t, "qemu-utils", "qemu-img")
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// testImages makes a raw image with random data in a few places and zero
// runs between, and the same as qcow2. It returns their paths.
func testImages(t *testing.T) (raw, qcow2 string) {
	t.Helper()
	dir := t.TempDir()
	raw = filepath.Join(dir, "disk.raw")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Odd offsets and lengths, so that data and zeros do not line up with
	// the 4 KiB blocks the staging file is written in.
	for _, r := range [][2]int64{{0, 70000}, {3<<20 + 123, 1 << 20}, {9 << 20, 4096}, {testImageSize - 5000, 5000}} {
		b := make([]byte, r[1])
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		if _, err := f.WriteAt(b, r[0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(testImageSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	qcow2 = filepath.Join(dir, "disk.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", raw, qcow2)
	return raw, qcow2
}

func compress(t *testing.T, path, kind string) string {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var w io.WriteCloser
	switch kind {
	case "gz":
		w = gzip.NewWriter(&buf)
	case "xz":
		if w, err = xz.NewWriter(&buf); err != nil {
			t.Fatal(err)
		}
	case "zst":
		if w, err = zstd.NewWriter(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := path + "." + kind
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// serveDir serves dir's files on 127.0.0.1.
func serveDir(t testing.TB, dir string) string {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// newTarget makes a regular file of size bytes standing in for a block
// device, filled with fill when not 0.
func newTarget(t testing.TB, size int64, fill byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "target")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if fill != 0 {
		if _, err := f.Write(bytes.Repeat([]byte{fill}, int(size))); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha256Of(t *testing.T, path string) string {
	sum := sha256.Sum256(readFile(t, path))
	return hex.EncodeToString(sum[:])
}

// assertNoStaging fails when Import left a file in the scratch directory.
func assertNoStaging(t *testing.T, scratch string) {
	t.Helper()
	entries, err := os.ReadDir(scratch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the scratch directory: %s", e.Name())
	}
}

func TestImportHTTP(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	raw, qcow2 := testImages(t)
	dir := filepath.Dir(raw)
	files := map[string]struct{ file, format string }{
		"raw":       {raw, "raw"},
		"qcow2":     {qcow2, "qcow2"},
		"raw.gz":    {compress(t, raw, "gz"), "raw"},
		"raw.xz":    {compress(t, raw, "xz"), "raw"},
		"raw.zst":   {compress(t, raw, "zst"), "raw"},
		"qcow2.gz":  {compress(t, qcow2, "gz"), "qcow2"},
		"qcow2.xz":  {compress(t, qcow2, "xz"), "qcow2"},
		"qcow2.zst": {compress(t, qcow2, "zst"), "qcow2"},
	}
	want := readFile(t, raw) // what qemu-img convert -O raw gives of either
	base := serveDir(t, dir)
	for name, tc := range files {
		t.Run(name, func(t *testing.T) {
			target := newTarget(t, testTargetSize, 0)
			scratch := t.TempDir()
			src := Source{URL: base + "/" + filepath.Base(tc.file), Checksum: "sha256:" + strings.ToUpper(sha256Of(t, tc.file))}
			res, err := Import(context.Background(), src, Options{Target: target, ScratchDir: scratch})
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(tc.file)
			wantRes := Result{Format: tc.format, VirtualSize: testImageSize, SourceBytes: fi.Size(), SHA256: sha256Of(t, tc.file)}
			if res != wantRes {
				t.Errorf("result: got %+v, want %+v", res, wantRes)
			}
			got := readFile(t, target)
			if len(got) != testTargetSize {
				t.Fatalf("target's size: got %d, want %d", len(got), testTargetSize)
			}
			if !bytes.Equal(got[:testImageSize], want) {
				t.Error("target's first virtual-size bytes differ from the raw image")
			}
			if !isAllZero(got[testImageSize:]) {
				t.Error("target past the image's virtual size is not zero")
			}
			assertNoStaging(t, scratch)
		})
	}
}

func isAllZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TestImportFileSparse imports a local file and checks that the target,
// a regular file, stays sparse: zeros were skipped, not written.
func TestImportFileSparse(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	_, qcow2 := testImages(t)
	target := newTarget(t, testTargetSize, 0)
	if _, err := Import(context.Background(), Source{File: qcow2}, Options{Target: target, ScratchDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	used := allocated(t, target)
	// The image has about 1.1 MiB of data.
	if used > 4<<20 {
		t.Errorf("target takes %d bytes on disk, want it sparse (about 1 MiB)", used)
	}
}

func TestImportReader(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	raw, _ := testImages(t)
	gz := compress(t, raw, "gz")
	data := readFile(t, gz)
	target := newTarget(t, testTargetSize, 0)
	var last Progress
	res, err := Import(context.Background(),
		Source{Reader: bytes.NewReader(data), Name: "upload:disk.raw.gz", Size: int64(len(data))},
		Options{Target: target, ScratchDir: t.TempDir(), Progress: func(p Progress) {
			if p.Phase == PhaseDownloading {
				last = p
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != "raw" || res.SourceBytes != int64(len(data)) {
		t.Errorf("result: got %+v", res)
	}
	if last.Done != int64(len(data)) || last.Total != int64(len(data)) {
		t.Errorf("last download progress: got %+v, want Done and Total %d", last, len(data))
	}
	if !bytes.Equal(readFile(t, target)[:testImageSize], readFile(t, raw)) {
		t.Error("target differs from the raw image")
	}
}

// TestImportSHA512: Debian publishes SHA512SUMS; such a checksum is
// checked as a sha256 is, and a mismatch names the sha512 that was read.
func TestImportSHA512(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	raw, qcow2 := testImages(t)
	sum := sha512.Sum512(readFile(t, qcow2))
	good := "sha512:" + hex.EncodeToString(sum[:])
	target := newTarget(t, testTargetSize, 0)
	res, err := Import(context.Background(), Source{File: qcow2, Checksum: strings.ToUpper(good[:7]) + good[7:]}, Options{Target: target, ScratchDir: t.TempDir()})
	if err == nil {
		t.Fatal("upper-case algorithm accepted")
	}
	res, err = Import(context.Background(), Source{File: qcow2, Checksum: good}, Options{Target: target, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 != sha256Of(t, qcow2) {
		t.Errorf("the record's SHA256: got %s", res.SHA256)
	}
	if !bytes.Equal(readFile(t, target)[:testImageSize], readFile(t, raw)) {
		t.Error("target differs from the raw image")
	}

	wrong := "sha512:" + strings.Repeat("ab", 64)
	_, err = Import(context.Background(), Source{File: qcow2, Checksum: wrong}, Options{Target: newTarget(t, testTargetSize, 0), ScratchDir: t.TempDir()})
	var ce *ChecksumError
	if !errors.As(err, &ce) || ce.Want != wrong || ce.Got != good {
		t.Fatalf("got %v, want a *ChecksumError from %s to %s", err, wrong, good)
	}
}

func TestImportChecksumMismatch(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	_, qcow2 := testImages(t)
	base := serveDir(t, filepath.Dir(qcow2))
	target := newTarget(t, testTargetSize, 0x5a)
	before := readFile(t, target)
	scratch := t.TempDir()
	wrong := "sha256:" + strings.Repeat("ab", 32)
	_, err := Import(context.Background(), Source{URL: base + "/disk.qcow2", Checksum: wrong},
		Options{Target: target, ScratchDir: scratch})
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *ChecksumError", err)
	}
	if ce.Want != wrong || ce.Got != "sha256:"+sha256Of(t, qcow2) {
		t.Errorf("got %+v", ce)
	}
	if r := Reason(err); r != "ChecksumMismatch" {
		t.Errorf("reason: got %q", r)
	}
	if !bytes.Equal(readFile(t, target), before) {
		t.Error("target changed")
	}
	assertNoStaging(t, scratch)
}

func TestImportErrors(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	raw, qcow2 := testImages(t)
	dir := filepath.Dir(raw)
	qemuImg(t, "convert", "-f", "raw", "-O", "vmdk", raw, filepath.Join(dir, "disk.vmdk"))
	qemuImg(t, "create", "-f", "qcow2", "-b", qcow2, "-F", "qcow2", filepath.Join(dir, "backed.qcow2"))
	qemuImg(t, "create", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), filepath.Join(dir, "datafile.qcow2"), "1M")
	// A data file that does not exist: refused before qemu-img tries it.
	qemuImg(t, "create", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data2.raw"), filepath.Join(dir, "nodatafile.qcow2"), "1M")
	if err := os.Remove(filepath.Join(dir, "data2.raw")); err != nil {
		t.Fatal(err)
	}
	base := serveDir(t, dir)
	for _, tc := range []struct {
		name, path string
		targetSize int64
		wantErr    any
		reason     string
	}{
		{"404", "/nothere.qcow2", testTargetSize, new(*HTTPError), "HTTPError"},
		{"too large", "/disk.qcow2", testImageSize - 512, new(*TooLargeError), "ImageTooLarge"},
		{"vmdk", "/disk.vmdk", testTargetSize, new(*FormatError), "UnknownFormat"},
		{"backing file", "/backed.qcow2", testTargetSize, new(*FormatError), "UnknownFormat"},
		{"data file", "/datafile.qcow2", testTargetSize, new(*FormatError), "UnknownFormat"},
		{"missing data file", "/nodatafile.qcow2", testTargetSize, new(*FormatError), "UnknownFormat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := newTarget(t, tc.targetSize, 0x5a)
			before := readFile(t, target)
			scratch := t.TempDir()
			_, err := Import(context.Background(), Source{URL: base + tc.path}, Options{Target: target, ScratchDir: scratch})
			if !errors.As(err, tc.wantErr) {
				t.Fatalf("got %v, want a %T", err, tc.wantErr)
			}
			t.Log(err)
			if r := Reason(err); r != tc.reason {
				t.Errorf("reason: got %q, want %q", r, tc.reason)
			}
			if !bytes.Equal(readFile(t, target), before) {
				t.Error("target changed")
			}
			assertNoStaging(t, scratch)
		})
	}
}

func TestHTTPErrorMessage(t *testing.T) {
	base := serveDir(t, t.TempDir())
	_, err := Import(context.Background(), Source{URL: base + "/x.img"},
		Options{Target: newTarget(t, 1<<20, 0), ScratchDir: t.TempDir()})
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 404 {
		t.Fatalf("got %v", err)
	}
	if want := "GET " + base + "/x.img: 404 Not Found"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

// TestImportText: a text file probes as raw, and a raw image is any bytes
// at all; it is imported as such (the guest will not boot it, but nothing
// is unsafe about it).
func TestImportText(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	text := filepath.Join(t.TempDir(), "readme.txt")
	content := []byte("this is no disk image\n")
	if err := os.WriteFile(text, content, 0o644); err != nil {
		t.Fatal(err)
	}
	target := newTarget(t, 1<<20, 0)
	res, err := Import(context.Background(), Source{File: text}, Options{Target: target, ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// qemu-img rounds a raw image's size up to whole sectors.
	if res.Format != "raw" || res.VirtualSize != 512 {
		t.Errorf("result: got %+v", res)
	}
	got := readFile(t, target)
	if !bytes.Equal(got[:len(content)], content) || !isAllZero(got[len(content):]) {
		t.Error("target does not hold the text followed by zeros")
	}
}

func TestImportProgress(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	_, qcow2 := testImages(t)
	base := serveDir(t, filepath.Dir(qcow2))
	var got []Progress
	_, err := Import(context.Background(), Source{URL: base + "/disk.qcow2"}, Options{
		Target:     newTarget(t, testTargetSize, 0),
		ScratchDir: t.TempDir(),
		Progress:   func(p Progress) { got = append(got, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(qcow2)
	var sawDownload bool
	for _, p := range got {
		if p.Phase == PhaseDownloading {
			sawDownload = true
			if p.Total != fi.Size() {
				t.Errorf("download total: got %d, want %d", p.Total, fi.Size())
			}
		}
	}
	if !sawDownload {
		t.Errorf("no download progress in %+v", got)
	}
	// qemu-img's own "(0.00/100%)" comes before the end's report.
	var fromQemuImg bool
	for _, p := range got[:len(got)-1] {
		fromQemuImg = fromQemuImg || p.Phase == PhaseConverting && p.Total == testImageSize
	}
	if !fromQemuImg {
		t.Errorf("no progress parsed from qemu-img in %+v", got)
	}
	last := got[len(got)-1]
	if last.Phase != PhaseConverting || last.Done != testImageSize || last.Total != testImageSize {
		t.Errorf("last progress: got %+v, want converting %d of %d", last, testImageSize, testImageSize)
	}
}

func TestImportCancel(t *testing.T) {
	stalled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000000")
		_, _ = w.Write(make([]byte, 64<<10))
		w.(http.Flusher).Flush()
		close(stalled)
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stalled
		cancel()
	}()
	scratch := t.TempDir()
	start := time.Now()
	_, err := Import(ctx, Source{URL: srv.URL + "/slow.img"}, Options{Target: newTarget(t, 1<<20, 0), ScratchDir: scratch})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to stop", d)
	}
	assertNoStaging(t, scratch)
}

// TestImportCancelConvert: canceling ctx stops qemu-img convert too. A
// stand-in for qemu-img reports the start of its conversion and then
// hangs.
func TestImportCancelConvert(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	_, qcow2 := testImages(t)
	slow := filepath.Join(t.TempDir(), "qemu-img")
	script := "#!/bin/sh\nif [ \"$1\" = convert ]; then echo '    (0.00/100%)'; exec sleep 60; fi\nexec qemu-img \"$@\"\n"
	if err := os.WriteFile(slow, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err := Import(ctx, Source{File: qcow2}, Options{
		Target:     newTarget(t, testTargetSize, 0),
		ScratchDir: t.TempDir(),
		QemuImg:    slow,
		Progress: func(p Progress) {
			if p.Phase == PhaseConverting {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to stop", d)
	}
}

// TestImportStall: a server that stops sending ends the download after
// StallTimeout, with an error that says so.
func TestImportStall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000000")
		for range 3 {
			_, _ = w.Write(make([]byte, 64<<10))
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	start := time.Now()
	_, err := Import(context.Background(), Source{URL: srv.URL + "/stalls.img"},
		Options{Target: newTarget(t, 1<<20, 0), ScratchDir: t.TempDir(), StallTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "GET "+srv.URL+"/stalls.img: no data for 500ms") {
		t.Errorf("got %v, want no data for 500ms", err)
	}
	// Each write put the stall off: the last of 3 writes 300 ms apart is
	// at 600 ms, the stall 500 ms later.
	if d := time.Since(start); d < 1000*time.Millisecond || d > 4*time.Second {
		t.Errorf("took %v to stop, want about 1.1s", d)
	}
}

// TestImportTruncated: a download that ends early is an error, not a
// shorter image.
func TestImportTruncated(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	raw, _ := testImages(t)
	gz := readFile(t, compress(t, raw, "gz"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000000")
		_, _ = w.Write(gz[:len(gz)/2])
	}))
	defer srv.Close()
	_, err := Import(context.Background(), Source{URL: srv.URL + "/cut.raw.gz"},
		Options{Target: newTarget(t, testTargetSize, 0), ScratchDir: t.TempDir()})
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
}

// TestImportShortReader: a reader that ends before its Size is an error.
func TestImportShortReader(t *testing.T) {
	target := newTarget(t, 1<<20, 0x5a)
	before := readFile(t, target)
	_, err := Import(context.Background(), Source{Reader: bytes.NewReader(make([]byte, 1000)), Name: "upload:x", Size: 2000},
		Options{Target: target, ScratchDir: t.TempDir()})
	if err == nil || err.Error() != "upload:x: read 1000 bytes, want 2000" {
		t.Errorf("got %v", err)
	}
	if !bytes.Equal(readFile(t, target), before) {
		t.Error("target changed")
	}
}

func TestImportInvalid(t *testing.T) {
	target := newTarget(t, 1<<20, 0)
	for name, src := range map[string]Source{
		"none":     {},
		"two":      {URL: "http://127.0.0.1/x", File: "/x"},
		"ftp":      {URL: "ftp://127.0.0.1/x"},
		"checksum": {File: "/x", Checksum: "md5:00"},
		"empty":    {Reader: bytes.NewReader(nil)},
	} {
		if _, err := Import(context.Background(), src, Options{Target: target, ScratchDir: t.TempDir()}); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		nil:              "",
		errors.New("x"):  "ImportFailed",
		&HTTPError{}:     "HTTPError",
		&ChecksumError{}: "ChecksumMismatch",
		&TooLargeError{}: "ImageTooLarge",
		&FormatError{}:   "UnknownFormat",
		context.Canceled: "ImportFailed",
	} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v): got %q, want %q", err, got, want)
		}
	}
}

// TestImportStagingBound: an image whose data runs past what the target
// could hold stops being staged there (a small gzip of zeros that expands
// to 64 MiB, for a 1 MiB target): the scratch volume is not filled by a
// decompression bomb, and the target stays as it was.
func TestImportStagingBound(t *testing.T) {
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	data := make([]byte, 64<<20)
	data[0] = 1 // not all zero: the file's data, not a hole
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bomb.raw.gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	target := newTarget(t, 1<<20, 0x5a)
	before := readFile(t, target)
	scratch := t.TempDir()
	_, err := Import(t.Context(), Source{URL: serveDir(t, dir) + "/bomb.raw.gz"}, Options{Target: target, ScratchDir: scratch})
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.StagedBytes != stagingLimit(1<<20)+1 {
		t.Fatalf("got %v (%#v), want a TooLargeError after %d staged bytes", err, tooLarge, stagingLimit(1<<20)+1)
	}
	if Reason(err) != "ImageTooLarge" || !strings.Contains(err.Error(), "staging stopped") {
		t.Fatalf("reason %q, error %q", Reason(err), err)
	}
	if !bytes.Equal(before, readFile(t, target)) {
		t.Fatal("the target changed")
	}
	assertNoStaging(t, scratch)
}
