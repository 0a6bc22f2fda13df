package diskimport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// imageInfo is the part of `qemu-img info --output=json` that Import
// decides on.
type imageInfo struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	BackingFilename string `json:"backing-filename"`
	FormatSpecific  struct {
		Data struct {
			DataFile string `json:"data-file"`
		} `json:"data"`
	} `json:"format-specific"`
}

// qemuImgInfo lets qemu-img probe the format of file: the staged image is
// whatever was served, and its own bytes say what it is.
func qemuImgInfo(ctx context.Context, qemuImg, file string) (imageInfo, error) {
	var info imageInfo
	cmd := exec.CommandContext(ctx, qemuImg, "info", "--output=json", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return info, fmt.Errorf("%s info %s: %w%s", qemuImg, file, exitCause(ctx, err), stderrText(&stderr))
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return info, fmt.Errorf("%s info %s: parse its output: %w", qemuImg, file, err)
	}
	if info.Format == "" || info.VirtualSize <= 0 {
		return info, fmt.Errorf("%s info %s: no format or virtual size in its output", qemuImg, file)
	}
	return info, nil
}

// qcow2 header fields (docs/interop/qcow2.txt in qemu's source).
const (
	qcow2Magic            = "QFI\xfb"
	qcow2HeaderV3Len      = 104
	qcow2IncompatDataFile = 1 << 2
)

// checkQcow2Header refuses a qcow2 image that refers to another file,
// before qemu-img opens it: qemu-img info would already open an external
// data file, which may name any file or device of the pod.
func checkQcow2Header(file, source string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := make([]byte, qcow2HeaderV3Len)
	n, err := io.ReadFull(f, h)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	h = h[:n]
	if n < 20 || string(h[:4]) != qcow2Magic {
		return nil
	}
	if backingOffset := binary.BigEndian.Uint64(h[8:16]); backingOffset != 0 {
		return &FormatError{Source: source, Format: "qcow2", Detail: "refused: it has a backing file, which could read other files"}
	}
	version := binary.BigEndian.Uint32(h[4:8])
	if version >= 3 && n >= 80 {
		if incompat := binary.BigEndian.Uint64(h[72:80]); incompat&qcow2IncompatDataFile != 0 {
			return &FormatError{Source: source, Format: "qcow2", Detail: "refused: it has an external data file, which could read other files"}
		}
	}
	return nil
}

// checkInfo accepts the formats a disk can be filled from safely.
func checkInfo(info imageInfo, source string) error {
	switch info.Format {
	case "raw":
	case "qcow2":
		if info.BackingFilename != "" {
			return &FormatError{Source: source, Format: info.Format,
				Detail: fmt.Sprintf("refused: it has a backing file %q, which could read other files", info.BackingFilename)}
		}
		if f := info.FormatSpecific.Data.DataFile; f != "" {
			return &FormatError{Source: source, Format: info.Format,
				Detail: fmt.Sprintf("refused: it has an external data file %q, which could read other files", f)}
		}
	default:
		return &FormatError{Source: source, Format: info.Format, Detail: "want qcow2 or raw"}
	}
	return nil
}

// progressPattern matches what `qemu-img convert -p` prints, e.g.
// "    (12.34/100%)", each update ended by \r.
var progressPattern = regexp.MustCompile(`\((\d+(?:\.\d+)?)/100%\)`)

// qemuImgConvert writes file's content as raw into the existing target.
// The format is given (-f), never probed: a raw image may look like
// anything. -n writes into the target as it is; zero regions become
// write-zeroes requests (holes in a file, discards or BLKZEROOUT on a
// device) rather than written zeros, as long as nothing like -S 0 asks
// otherwise.
func qemuImgConvert(ctx context.Context, qemuImg, format, file, target string, virtualSize int64, progress func(Progress)) error {
	cmd := exec.CommandContext(ctx, qemuImg, "convert", "-p", "-f", format, "-O", "raw", "-n", file, target)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	reporter := &progressReporter{fn: progress, phase: PhaseConverting, total: virtualSize}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s convert %s to %s: %w", qemuImg, file, target, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Split(splitCRLF)
	for sc.Scan() {
		m := progressPattern.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		pct, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			continue
		}
		reporter.report(int64(pct/100*float64(virtualSize)), false)
	}
	// Whatever else it printed must not block it.
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s convert %s to %s: %w%s", qemuImg, file, target, exitCause(ctx, err), stderrText(&stderr))
	}
	reporter.report(virtualSize, true)
	return nil
}

// exitCause is why qemu-img failed: ctx's error when ctx ended it (its
// exit error would only say "signal: killed").
func exitCause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return err
}

// splitCRLF splits qemu-img's output into lines ended by \r or \n.
func splitCRLF(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// stderrText is qemu-img's stderr for an error message, e.g.
// ": qemu-img: Could not open 'x': ...".
func stderrText(b *bytes.Buffer) string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return ""
	}
	return ": " + s
}
