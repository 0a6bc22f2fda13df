package diskimport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const (
	benchChunk  = 8 << 20
	benchStride = 32 << 20 // a quarter of the image is random data
)

// benchImage returns a qcow2 image of virtualSize bytes with a quarter of
// them random data spread in it (512 MiB of 2 GiB), built once and kept in
// the user's cache directory (or in the benchmark's temporary directory
// when there is none).
func benchImage(b *testing.B, virtualSize int64) string {
	b.Helper()
	dir := b.TempDir()
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "vmop", "bench")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	// The name says what is in it: a change of the recipe gets a new file.
	img := filepath.Join(dir, fmt.Sprintf("diskimport-%d-%d-%d.qcow2", virtualSize, benchChunk, benchStride))
	if _, err := os.Stat(img); err == nil {
		return img
	}
	raw := filepath.Join(b.TempDir(), "bench.raw")
	f, err := os.Create(raw)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, benchChunk)
	for off := int64(0); off < virtualSize; off += benchStride {
		_, _ = rng.Read(buf) // ChaCha8 never fails
		if _, err := f.WriteAt(buf, off+benchStride/2); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Truncate(virtualSize); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	tmp := img + ".tmp"
	qemuImg(b, "convert", "-f", "raw", "-O", "qcow2", raw, tmp)
	if err := os.Rename(tmp, img); err != nil {
		b.Fatal(err)
	}
	return img
}

// maxRSS is the peak resident set of this process (RUSAGE_SELF) or of the
// largest child waited for so far (RUSAGE_CHILDREN), in MiB.
func maxRSS(b *testing.B, who int) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

// BenchmarkImport imports a 2 GiB qcow2 image with 512 MiB of data over
// http on 127.0.0.1 into a 2 GiB sparse file, and compares it with a plain
// local qemu-img convert of the same file, without and with a sync of the
// target; then a 10 GiB one (2.5 GiB of data) over http, whose peak RSS
// shows that the memory does not grow with the image. MiB/s are of the
// image as served. RUSAGE_SELF and RUSAGE_CHILDREN are peaks over the
// process's life (every qemu-img waited for so far, the image's build
// included when it was not cached yet).
func BenchmarkImport(b *testing.B) {
	b.Run("2GiB", func(b *testing.B) { benchImport(b, 2<<30, true) })
	b.Run("10GiB", func(b *testing.B) { benchImport(b, 10<<30, false) })
}

func benchImport(b *testing.B, virtualSize int64, local bool) {
	img := benchImage(b, virtualSize)
	fi, err := os.Stat(img)
	if err != nil {
		b.Fatal(err)
	}
	base := serveDir(b, filepath.Dir(img))
	b.Run("http", func(b *testing.B) {
		b.SetBytes(fi.Size())
		var total time.Duration
		for b.Loop() {
			b.StopTimer()
			target := newTarget(b, virtualSize, 0)
			scratch := b.TempDir()
			b.StartTimer()
			start := time.Now()
			res, err := Import(context.Background(), Source{URL: base + "/" + filepath.Base(img)},
				Options{Target: target, ScratchDir: scratch})
			total += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if res.VirtualSize != virtualSize {
				b.Fatalf("virtual size: got %d", res.VirtualSize)
			}
		}
		b.ReportMetric(float64(fi.Size())/(1<<20)/(total.Seconds()/float64(b.N)), "MiB/s")
		b.ReportMetric(maxRSS(b, syscall.RUSAGE_SELF), "peak-RSS-MiB")
		b.ReportMetric(maxRSS(b, syscall.RUSAGE_CHILDREN), "qemu-img-peak-RSS-MiB")
	})
	if !local {
		return
	}
	// Import syncs the target, plain qemu-img does not: with the sync the
	// two write the same to the disk but for the staging file.
	for _, sync := range []bool{false, true} {
		name := "local-qemu-img"
		if sync {
			name += "+sync"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(fi.Size())
			var total time.Duration
			var peak int64
			for b.Loop() {
				b.StopTimer()
				target := newTarget(b, virtualSize, 0)
				b.StartTimer()
				start := time.Now()
				cmd := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", "-n", img, target)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("qemu-img convert: %v: %s", err, out)
				}
				if sync {
					if err := syncFile(target); err != nil {
						b.Fatal(err)
					}
				}
				total += time.Since(start)
				peak = max(peak, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
			}
			b.ReportMetric(float64(fi.Size())/(1<<20)/(total.Seconds()/float64(b.N)), "MiB/s")
			b.ReportMetric(float64(peak)/1024, "qemu-img-peak-RSS-MiB")
		})
	}
}
