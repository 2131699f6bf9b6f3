package kit

import (
	"io"
	"os"
)

// TailFile opens a log file positioned at its last n lines (at its start when n <= 0 or it
// has fewer), reading backwards from its end: for pools that keep their workers' logs in
// files (LogSource).
func TailFile(path string, n int) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return f, nil
	}
	off, err := lineStart(f, n)
	if err == nil {
		_, err = f.Seek(off, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// lineStart returns the offset where the last n lines of f begin, reading it backwards.
func lineStart(f *os.File, n int) (int64, error) {
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := info.Size()
	buf := make([]byte, 32<<10)
	seen := 0
	for pos := end; pos > 0; {
		size := min(int64(len(buf)), pos)
		pos -= size
		chunk := buf[:size]
		if _, err := f.ReadAt(chunk, pos); err != nil && err != io.EOF {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' || pos+int64(i) == end-1 { // a final newline ends the last line
				continue
			}
			if seen++; seen == n {
				return pos + int64(i) + 1, nil
			}
		}
	}
	return 0, nil
}
