package aggregator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// URLFile is the file in the embedded server's store where the process
// holding the store writes the server's client URL, so a command that
// finds the store in use can name the URL to read through instead.
const URLFile = ".gttsplit.url"

// storeBusy is StartEmbedded's error when another process holds the
// store: err wraps ErrStoreInUse, url is the holder's client URL ("" when
// it has not written one).
type storeBusy struct {
	err error
	url string
}

func (e *storeBusy) Error() string {
	return "embedded NATS store " + e.err.Error() + ": stop the other `aggregator serve` or `aggregator export` on it, or give another --store"
}

func (e *storeBusy) Unwrap() error { return e.err }

// newStoreBusy is the error of a store that err (wrapping ErrStoreInUse)
// says another process holds.
func newStoreBusy(store string, err error) error {
	b := &storeBusy{err: err}
	if data, rerr := os.ReadFile(filepath.Join(store, URLFile)); rerr == nil {
		b.url = strings.TrimSpace(string(data))
	}
	return b
}

// writeStoreURL records the embedded server's client URL in its store
// (best effort: it only improves another process's message).
func writeStoreURL(store, url string) {
	_ = os.WriteFile(filepath.Join(store, URLFile), []byte(url+"\n"), 0o644)
}

// forReader rewords a store-in-use error for a command that only reads
// the store (export, compare, gate, history): it can read through the
// aggregator that holds it.
func forReader(err error) error {
	var b *storeBusy
	if !errors.As(err, &b) {
		return err
	}
	url := b.url
	if url == "" {
		url = "URL (the server it runs: its log's \"embedded NATS server ... ready\" line)"
	}
	return fmt.Errorf("embedded NATS store %w: read through the aggregator that holds it with --nats-url %s instead of --store", b.err, url)
}
