package lane

import (
	"bytes"
	"io"
	"sync"

	"github.com/caravan-gpu/caravan/internal/safefile"
)

// IterationEnv names the file where a cooperating job marks the end of each
// iteration by appending one line (any content, conventionally the
// iteration number). The driver reads the line count.
const IterationEnv = "CARAVAN_ITERATION_FILE"

// IterationCounter counts the lines appended to an iteration file, reading
// only what is new since the last call.
type IterationCounter struct {
	path string

	mu     sync.Mutex
	offset int64
	count  int64
}

// NewIterationCounter counts lines in path.
func NewIterationCounter(path string) *IterationCounter { return &IterationCounter{path: path} }

// Path is the file counted.
func (c *IterationCounter) Path() string { return c.path }

// Count returns the number of completed iterations marked so far.
func (c *IterationCounter) Count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The task owns the file and may have put a symlink or a FIFO in its
	// place; the driver, as root, reads only a regular file.
	f, err := safefile.OpenRegular(c.path)
	if err != nil {
		return c.count
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() <= c.offset {
		if err == nil && st.Size() < c.offset {
			// Truncated: the job started over.
			c.offset, c.count = 0, 0
		} else {
			return c.count
		}
	}
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return c.count
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			// Count only complete lines so that a half-written mark is
			// read again next time.
			chunk := buf[:n]
			last := bytes.LastIndexByte(chunk, '\n')
			if last < 0 {
				break
			}
			c.count += int64(bytes.Count(chunk[:last+1], []byte{'\n'}))
			c.offset += int64(last + 1)
			if last+1 < n {
				break
			}
		}
		if err != nil {
			break
		}
	}
	return c.count
}
