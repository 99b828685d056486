package localurl_test

import (
	"os"
	"testing"

	"github.com/jetrun/jetrun/internal/app/localurl"
)

func TestWriteReadRemove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if url, err := localurl.Read(dir); url != "" || err != nil {
		t.Fatalf("no file: %q %v", url, err)
	}
	const url = "nats://127.0.0.1:40123"
	if err := localurl.Write(dir, url); err != nil {
		t.Fatal(err)
	}
	if got, err := localurl.Read(dir); got != url || err != nil {
		t.Fatalf("read %q %v", got, err)
	}
	if err := localurl.Remove(dir, "nats://127.0.0.1:1"); err != nil { // another server's: kept
		t.Fatal(err)
	}
	if got, _ := localurl.Read(dir); got != url {
		t.Fatalf("a Remove of another URL removed the file")
	}
	if err := localurl.Remove(dir, url); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(localurl.Path(dir)); !os.IsNotExist(err) {
		t.Fatalf("after Remove: %v", err)
	}
	if err := os.WriteFile(localurl.Path(dir), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := localurl.Read(dir); got != "" || err == nil {
		t.Fatalf("garbage read as %q %v", got, err)
	}
}
