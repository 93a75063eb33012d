package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RejectedDir is the directory, inside the spool directory, where events
// the broker refused for good are set aside: one JSON file each,
// {"rejected_at","reason","subject","id","bytes","event"}, "event" being
// the structured event as it was sent (a string when it is not JSON).
// The publisher never reads them again; remove them once looked at. It
// stops writing there when the files add up to spool.max_bytes.
const RejectedDir = "rejected"

type rejectedRecord struct {
	RejectedAt time.Time       `json:"rejected_at"`
	Reason     string          `json:"reason"`
	Subject    string          `json:"subject"`
	ID         string          `json:"id"`
	Bytes      int             `json:"bytes"`
	Event      json.RawMessage `json:"event"`
}

// rejectedDir is a publisher's RejectedDir, bounded by spool.max_bytes.
type rejectedDir struct {
	dir   string // the spool directory
	max   int64  // spool.max_bytes
	bytes atomic.Int64
}

// path is RejectedDir inside the spool directory.
func (r *rejectedDir) path() string { return filepath.Join(r.dir, RejectedDir) }

// loadBytes counts what an earlier process set aside.
func (r *rejectedDir) loadBytes() { r.bytes.Store(dirBytes(r.path())) }

// setAside writes w to RejectedDir and returns the file's path.
func (r *rejectedDir) setAside(w events.Wire, reason error) (string, error) {
	dir := r.path()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if r.bytes.Load() >= r.max {
		return "", fmt.Errorf("%s holds %d bytes, the spool's max_bytes: not written", dir, r.bytes.Load())
	}
	raw := json.RawMessage(w.Data)
	if !json.Valid(w.Data) {
		b, _ := json.Marshal(string(w.Data))
		raw = b
	}
	b, err := json.Marshal(rejectedRecord{RejectedAt: time.Now().UTC(), Reason: Clip(reason.Error(), 1024),
		Subject: w.Subject, ID: Clip(w.ID, 256), Bytes: len(w.Data), Event: raw})
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(dir, time.Now().UTC().Format("20060102T150405.000000000Z")+"-*.json")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	if cerr := f.Close(); werr == nil && serr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = serr
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return "", werr
	}
	r.bytes.Add(int64(len(b)))
	return f.Name(), nil
}

// dirBytes sums the sizes of the regular files in dir (0 when it does not
// exist).
func dirBytes(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// permanent reports errors that re-sending cannot fix: the event is over
// the broker's max_payload, or the broker answered 400 (a bad request:
// e.g. headers over 64 KB from a huge Nats-Msg-Id), but not that its
// store is full (storeFull), which passes.
func permanent(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && !StoreFull(err) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || apiErr.Code == 400)
}

// JetStream error codes of a broker whose store (or the account's share of
// it) is full.
const (
	errCodeAccountResourcesExceeded jetstream.ErrorCode = 10002 // 400 resource limits exceeded for account
	errCodeInsufficientResources    jetstream.ErrorCode = 10023 // 503 insufficient resources
	errCodeMemoryResourcesExceeded  jetstream.ErrorCode = 10028 // 500 insufficient memory resources available
	errCodeStorageResourcesExceeded jetstream.ErrorCode = 10047 // 500 insufficient storage resources available
	errCodeStreamStoreFailed        jetstream.ErrorCode = 10077 // 503 the stream's store failed: "maximum bytes exceeded" with discard new, ...
)

// StoreFull reports the answer of a broker that is there but cannot store
// the event now: the server's or the account's JetStream store is full
// (503 "insufficient resources", err_code 10023, is what a full server
// store answers), or a stream that discards new events reached its
// maximum messages or bytes. Room comes back (a purge, a raised limit, max
// age), so the event is spooled and tried again, like one sent while the
// broker is away.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeAccountResourcesExceeded, errCodeInsufficientResources, errCodeMemoryResourcesExceeded, errCodeStorageResourcesExceeded:
		return true
	case errCodeStreamStoreFailed:
		return strings.Contains(apiErr.Description, "exceeded") // not "message too large"
	}
	return false
}
