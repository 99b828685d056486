package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the file of the data directory that the parent-worker using
// the directory holds locked (it also holds that process's pid).
const LockFile = "parent-worker.lock"

// ErrDataDirInUse is returned by Lock when another process holds the data
// directory.
var ErrDataDirInUse = errors.New("data directory in use")

// DirLock is a data directory's lock, held until Unlock or the end of the
// process.
type DirLock struct{ f *os.File }

// Lock takes dir's lock (creating dir if needed) without waiting. Two
// embedded servers on one store corrupt it (a run completed in one is
// re-created and run again, or lost, in the other), so a process that
// finds the lock held gets ErrDataDirInUse, with the holder's pid, before
// it opens anything in dir. The lock is an flock(2) on LockFile: the
// kernel releases it when the holder exits, however it exits (kill -9
// too), so no stale lock is ever left behind; the file is not inherited by
// child processes (close-on-exec).
func Lock(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
		}
		holder := "another process"
		if pid, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(pid)) != "" {
			holder = "process " + strings.TrimSpace(string(pid))
		}
		return nil, fmt.Errorf("%w: %s is used by %s, a parent-worker still running or still stopping "+
			"(it holds %s); stop it first, or give this one its own JETRUN_DATA_DIR", ErrDataDirInUse, dir, holder, path)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0) // the pid only names the holder
	}
	return &DirLock{f: f}, nil
}

// Unlock releases the lock. Call it once the embedded server has shut down.
func (l *DirLock) Unlock() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("unlock data directory: %w", err)
	}
	return nil
}
