package disk

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/vmop/vmop/pkg/runnerexec"
)

// redraw is how often the bar is drawn on a terminal.
const redraw = 200 * time.Millisecond

// barWidth is the number of cells of the bar.
const barWidth = 24

// progress tells how the upload goes, on w: on a terminal a bar (bytes
// sent of all, rate, time left; then the receiver's conversion), drawn
// again and again on one line; otherwise a line at every tenth of the
// bytes sent and of the conversion, and each other line of the receiver.
type progress struct {
	w     io.Writer
	tty   bool
	name  string
	total int64
	start time.Time
	sent  atomic.Int64

	mu sync.Mutex
	// phase is the receiver's latest (e.g. converting), "" until it
	// reports one; done and of its progress.
	phase    string
	done, of int64
	// tenth is the last tenth printed of the phase, in plain mode.
	tenth int
	stop  chan struct{}
	drawn sync.WaitGroup
}

func newProgress(w io.Writer, name string, total int64) *progress {
	p := &progress{w: w, name: name, total: total, start: time.Now(), tenth: -1}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
		p.stop = make(chan struct{})
		p.drawn.Add(1)
		go p.draw()
	}
	return p
}

// draw redraws the bar until end.
func (p *progress) draw() {
	defer p.drawn.Done()
	tick := time.NewTicker(redraw)
	defer tick.Stop()
	for {
		p.mu.Lock()
		fmt.Fprint(p.w, "\r"+p.bar()+"\x1b[K")
		p.mu.Unlock()
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

// bar is the bar's line: the bytes sent, then the receiver's phase.
func (p *progress) bar() string {
	if p.phase != "" {
		return fmt.Sprintf("%-12s %s %3d%%", p.phase, cells(p.done, p.of), percent(p.done, p.of))
	}
	sent := p.sent.Load()
	rate := float64(sent) / time.Since(p.start).Seconds()
	left := "--"
	if rate > 0 {
		left = (time.Duration(float64(p.total-sent)/rate) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("%-12s %s %3d%%  %s of %s  %s/s  %s left", p.name, cells(sent, p.total), percent(sent, p.total),
		mib(float64(sent)), mib(float64(p.total)), mib(rate), left)
}

// end stops the bar and leaves its last state on its line.
func (p *progress) end() {
	if !p.tty {
		return
	}
	close(p.stop)
	p.drawn.Wait()
	fmt.Fprint(p.w, "\r"+p.bar()+"\x1b[K\n")
}

// reader counts what is read from r as sent.
func (p *progress) reader(r io.Reader) io.Reader {
	return readFunc(func(b []byte) (int, error) {
		n, err := r.Read(b)
		sent := p.sent.Add(int64(n))
		if !p.tty {
			p.mu.Lock()
			if t := tenths(sent, p.total); t > p.tenth {
				p.tenth = t
				elapsed := time.Since(p.start)
				fmt.Fprintf(p.w, "%s: sent %d%% (%s of %s, %s/s)\n", p.name, t*10, mib(float64(sent)), mib(float64(p.total)), mib(float64(sent)/elapsed.Seconds()))
			}
			p.mu.Unlock()
		}
		return n, err
	})
}

// lines takes the receiver's stdout: its progress lines move the bar or
// print at each tenth; what else it says is printed as it is.
func (p *progress) lines() io.Writer { return &lineWriter{line: p.line} }

// lineWriter calls line for each whole line written to it.
type lineWriter struct {
	line    func(string)
	partial []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
}

func (p *progress) line(l string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	phase, done, of, ok := runnerexec.ParseProgress(l)
	if !ok {
		if p.tty {
			l = "\r\x1b[K" + l
		}
		fmt.Fprintln(p.w, l)
		return
	}
	if phase != p.phase {
		p.tenth = -1
	}
	p.phase, p.done, p.of = phase, done, of
	if t := tenths(done, of); !p.tty && t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "%s: %d%%\n", phase, t*10)
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

func percent(done, of int64) int {
	if of <= 0 {
		return 0
	}
	return int(min(done*100/of, 100))
}

func tenths(done, of int64) int { return percent(done, of) / 10 }

// cells draws done of of as a bar.
func cells(done, of int64) string {
	full := percent(done, of) * barWidth / 100
	return "[" + strings.Repeat("#", full) + strings.Repeat("-", barWidth-full) + "]"
}

// mib writes a byte count, or a rate, in MiB.
func mib(b float64) string {
	return fmt.Sprintf("%.1f MiB", b/(1<<20))
}
