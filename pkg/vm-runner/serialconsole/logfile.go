package serialconsole

import (
	"errors"
	"os"
	"path/filepath"
)

// logFile keeps the newest output in LogFile and, once that has size
// bytes, moves it to OldLogFile and starts a new one: at most twice size
// on disk however long the VM runs, and at least size of the last output.
type logFile struct {
	dir  string
	size int64
	f    *os.File
	n    int64 // bytes in f
}

func openLogFile(dir string, size int64) (*logFile, error) {
	l := &logFile{dir: dir, size: size}
	_ = os.Remove(filepath.Join(dir, OldLogFile)) // a previous run's
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) open() error {
	f, err := os.OpenFile(filepath.Join(l.dir, LogFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	l.f, l.n = f, 0
	return nil
}

// write appends b, moving the file aside whenever it is full, so each file
// holds exactly size bytes before it moves.
func (l *logFile) write(b []byte) error {
	for len(b) > 0 {
		if l.f == nil {
			return errors.New("the log file is closed")
		}
		if l.n >= l.size {
			if err := l.rotate(); err != nil {
				return err
			}
		}
		part := b[:min(int64(len(b)), l.size-l.n)]
		n, err := l.f.Write(part)
		l.n += int64(n)
		if err != nil {
			return err
		}
		b = b[len(part):]
	}
	return nil
}

func (l *logFile) rotate() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	l.f = nil
	if err := os.Rename(filepath.Join(l.dir, LogFile), filepath.Join(l.dir, OldLogFile)); err != nil {
		return err
	}
	return l.open()
}

func (l *logFile) history() ([]byte, error) { return ReadHistory(l.dir) }

func (l *logFile) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
