package diskimport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// bufSize is the size of each fixed buffer on the way from the source to
// the staging file; memory stays bounded whatever the image's size.
const bufSize = 1 << 20

// zeroBlock is the granularity at which runs of zeros become holes in the
// staging file: a file system's block, so a hole never splits one.
const zeroBlock = 4096

// zstdMaxWindow bounds the memory a zstd frame may ask for: enough for
// "zstd --long" (128 MiB), not the 2 GiB that --long=31 would take.
const zstdMaxWindow = 128 << 20

var (
	magicGzip = []byte{0x1f, 0x8b}
	magicXz   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// sourceReader counts and hashes the bytes as served and reports the
// download's progress.
type sourceReader struct {
	ctx      context.Context
	r        io.Reader
	hash     io.Writer
	progress *progressReporter
	n        int64
}

func (s *sourceReader) Read(p []byte) (int, error) {
	// A file or a pipe is not interrupted by ctx on its own.
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := s.r.Read(p)
	_, _ = s.hash.Write(p[:n]) // hashes never fail
	s.n += int64(n)
	s.progress.report(s.n, false)
	return n, err
}

// progressReporter calls a Progress callback about once a second and
// always at the end of a phase.
type progressReporter struct {
	fn    func(Progress)
	phase Phase
	total int64
	last  time.Time
}

func (p *progressReporter) report(done int64, end bool) {
	if p.fn == nil {
		return
	}
	now := time.Now()
	if !end && now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	p.fn(Progress{Phase: p.phase, Done: done, Total: p.total})
}

// staged is what stage learnt of the source.
type staged struct {
	sourceBytes int64
	sha256      string // hex
	// checksum is the hex digest of the algorithm stage was asked for.
	checksum    string
	compression string // "gzip", "xz", "zstd" or ""
	imageBytes  int64  // the staging file's size
}

// stage reads src once: it hashes the bytes as served (SHA-256 for the
// records, and with verify's algorithm when that is another),
// decompresses them when their magic says they are compressed and writes
// the result to dst, sparse.
// errStagedTooLarge: the image's data ran past stage's limit.
var errStagedTooLarge = errors.New("the image is larger than the limit")

func stage(ctx context.Context, src io.Reader, size, limit int64, dst *os.File, verify *Checksum, progress func(Progress)) (staged, error) {
	sum256 := sha256.New()
	sum := sum256
	var hashes io.Writer = sum256
	if verify != nil && verify.Algorithm != "sha256" {
		sum = verify.newHash()
		hashes = io.MultiWriter(sum256, sum)
	}
	sr := &sourceReader{
		ctx:      ctx,
		r:        src,
		hash:     hashes,
		progress: &progressReporter{fn: progress, phase: PhaseDownloading, total: size},
	}
	br := bufio.NewReaderSize(sr, bufSize)
	var st staged
	magic, err := br.Peek(len(magicXz))
	if err != nil && !errors.Is(err, io.EOF) {
		return st, err
	}
	var data io.Reader = br
	switch {
	case bytes.HasPrefix(magic, magicGzip):
		st.compression = "gzip"
		zr, err := gzip.NewReader(br)
		if err != nil {
			return st, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		data = zr
	case bytes.HasPrefix(magic, magicXz):
		st.compression = "xz"
		xr, err := xz.NewReader(br)
		if err != nil {
			return st, fmt.Errorf("xz: %w", err)
		}
		data = xr
	case bytes.HasPrefix(magic, magicZstd):
		st.compression = "zstd"
		zr, err := zstd.NewReader(br,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return st, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		data = zr
	}
	// A bound on what the scratch volume takes, whatever the source (a
	// compressed image may expand to far more than was downloaded).
	data = io.LimitReader(data, limit+1)
	st.imageBytes, err = writeSparse(dst, data)
	if err == nil && st.imageBytes > limit {
		return st, errStagedTooLarge
	}
	if err != nil {
		if st.compression != "" {
			return st, fmt.Errorf("%s: %w", st.compression, err)
		}
		return st, err
	}
	// The checksum is of everything served, also of what may follow the
	// compressed stream's end.
	if _, err := io.Copy(io.Discard, br); err != nil {
		return st, err
	}
	sr.progress.report(sr.n, true)
	st.sourceBytes = sr.n
	st.sha256 = hex.EncodeToString(sum256.Sum(nil))
	st.checksum = hex.EncodeToString(sum.Sum(nil))
	return st, nil
}

// writeSparse copies r to the start of f, skipping all-zero blocks
// instead of writing them, so that the staging file takes only the space
// of the image's data. It returns the bytes copied.
func writeSparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, bufSize)
	zeros := make([]byte, zeroBlock)
	var off int64
	for {
		n, rerr := fill(r, buf)
		data := buf[:n]
		for start := 0; start < len(data); {
			// Skip a run of zero blocks, then write a run of data blocks.
			for start < len(data) && isZero(data[start:min(start+zeroBlock, len(data))], zeros) {
				start += zeroBlock
			}
			end := start
			for end < len(data) && !isZero(data[end:min(end+zeroBlock, len(data))], zeros) {
				end += zeroBlock
			}
			end = min(end, len(data))
			if end > start {
				if _, err := f.WriteAt(data[start:end], off+int64(start)); err != nil {
					return off, err
				}
			}
			start = end
		}
		off += int64(n)
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF):
			// A trailing hole has no block to give the file its size.
			return off, f.Truncate(off)
		default:
			return off, rerr
		}
	}
}

// fill reads until buf is full or r fails. Unlike io.ReadFull it passes
// io.ErrUnexpectedEOF on as an error: it is how a truncated download or a
// truncated compressed stream ends.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func isZero(b, zeros []byte) bool {
	return bytes.Equal(b, zeros[:len(b)])
}
