// Package xscreen lets tests look at what a SPICE viewer shows: a virtual X
// screen (Xvfb) for the viewer, and screenshots of it (xwd).
package xscreen

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/artifact"
	"github.com/vmop/vmop/test/harness/prereq"
)

// Start runs a virtual X screen until the test ends and returns its
// DISPLAY. It fails the test when Xvfb or xwd is missing.
func Start(t *testing.T) string {
	t.Helper()
	prereq.Commands(t, "xvfb, x11-apps", "Xvfb", "xwd")
	return startXvfb(t)
}

// Env is what a viewer on display needs in its environment, as KEY=value.
func Env(display string) []string {
	return []string{"DISPLAY=" + display, "NO_AT_BRIDGE=1"} // no accessibility bus here
}

// Shot takes a screenshot of the whole screen of display.
func Shot(display string) (*image.RGBA, error) {
	b, err := exec.Command("xwd", "-root", "-silent", "-display", display).Output()
	if err != nil {
		return nil, err
	}
	return decodeXWD(b)
}

// Save keeps img as a PNG among the test's artifacts.
func Save(t *testing.T, img image.Image, name string) {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	artifact.Save(t, name, b.Bytes())
}

// ShowsGuest tells whether the screen shows the guest's display: the
// guest's text screen is black, unlike Xvfb's root window (-wr) and
// remote-viewer's own window (grey, also while it waits for the display).
func ShowsGuest(img *image.RGBA) error {
	black := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if c := img.RGBAAt(x, y); c.R == 0 && c.G == 0 && c.B == 0 {
				black++
			}
		}
	}
	if share := float64(black) / float64(b.Dx()*b.Dy()); share < 0.2 {
		return fmt.Errorf("the screen does not show the guest's display (%.0f%% black)", 100*share)
	}
	return nil
}

// startXvfb runs a virtual X screen until the test ends and returns its
// DISPLAY. Xvfb picks a free display number and writes it to -displayfd
// once it accepts clients.
func startXvfb(t *testing.T) string {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1024x768x24", "-wr", "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	log, err := os.Create(filepath.Join(t.TempDir(), "xvfb.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("Xvfb did not start: %v\n%s", err, b)
	}
	return ":" + strings.TrimSpace(line)
}

// decodeXWD decodes what xwd writes of a TrueColor screen with 24 or 32
// bits per pixel (Xvfb's at depth 24). The header is big-endian; the
// pixels are in the byte order that the header names.
func decodeXWD(b []byte) (*image.RGBA, error) {
	const headerFields = 25
	if len(b) < 4*headerFields {
		return nil, errors.New("xwd: short header")
	}
	h := make([]uint32, headerFields)
	for i := range h {
		h[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	headerSize, width, height, byteOrder := h[0], int(h[4]), int(h[5]), h[7]
	bitsPerPixel, bytesPerLine, masks, ncolors := h[11], int(h[12]), h[14:17], h[19]
	if bitsPerPixel != 24 && bitsPerPixel != 32 {
		return nil, fmt.Errorf("xwd: %d bits per pixel, want 24 or 32", bitsPerPixel)
	}
	bytesPerPixel := int(bitsPerPixel / 8)
	pixel := func(b []byte) uint32 {
		var p uint32
		for i := range bytesPerPixel {
			if byteOrder == 1 { // MSBFirst
				p = p<<8 | uint32(b[i])
			} else {
				p |= uint32(b[i]) << (8 * i)
			}
		}
		return p
	}
	start := int(headerSize) + 12*int(ncolors) // after the colour map
	if start+height*bytesPerLine > len(b) {
		return nil, errors.New("xwd: short pixel data")
	}
	channel := func(p, mask uint32) uint8 {
		for mask != 0 && mask&1 == 0 {
			p, mask = p>>1, mask>>1
		}
		return uint8(p & mask)
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		for x := range width {
			p := pixel(b[start+y*bytesPerLine+bytesPerPixel*x:])
			img.SetRGBA(x, y, color.RGBA{channel(p, masks[0]), channel(p, masks[1]), channel(p, masks[2]), 0xff})
		}
	}
	return img, nil
}
