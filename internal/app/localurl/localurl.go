// Package localurl is how child-worker and the jetrun CLI find the local
// parent-worker's embedded nats-server when JETRUN_NATS_URL is empty: the
// parent-worker writes the server's client URL to a file in its data
// directory (the server may have moved off 4222 to a random port), and
// removes it when it stops.
package localurl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// File is the name of the URL file in the data directory.
const File = "nats-url"

// Path returns the URL file's path in dataDir.
func Path(dataDir string) string { return filepath.Join(dataDir, File) }

// Write records url in dataDir's URL file, replacing it atomically.
func Write(dataDir, url string) error {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("localurl: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, "."+File+"-*")
	if err != nil {
		return fmt.Errorf("localurl: %w", err)
	}
	_, werr := tmp.WriteString(url + "\n")
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("localurl: write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), Path(dataDir)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("localurl: %w", err)
	}
	return nil
}

// Remove deletes dataDir's URL file if it still holds url.
func Remove(dataDir, url string) error {
	got, err := Read(dataDir)
	if err != nil || got != url {
		return err
	}
	if err := os.Remove(Path(dataDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localurl: %w", err)
	}
	return nil
}

// Read returns the URL recorded in dataDir, or "" when there is none.
func Read(dataDir string) (string, error) {
	data, err := os.ReadFile(Path(dataDir))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("localurl: %w", err)
	}
	url := strings.TrimSpace(string(data))
	if !strings.HasPrefix(url, "nats://") || strings.ContainsAny(url, " \t\n") {
		return "", fmt.Errorf("localurl: %s does not hold a nats:// URL", Path(dataDir))
	}
	return url, nil
}
