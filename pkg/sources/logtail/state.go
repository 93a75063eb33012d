package logtail

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// headBytes is how many leading bytes of a file a checkpoint hashes to
// recognise the file after a rename or a restart.
const headBytes = 1024

const checkpointVersion = 1

// checkpoint is a read position: after the line that ended at Offset in the
// file (Dev, Ino) whose first HeadLen bytes hash to HeadSHA256, the next
// line is numbered NextSeq. It is also the persisted state file's content.
type checkpoint struct {
	Version    int    `json:"version"`
	Path       string `json:"path"`
	RunID      string `json:"run_id,omitempty"`
	Dev        uint64 `json:"dev"`
	Ino        uint64 `json:"ino"`
	Offset     int64  `json:"offset"`
	NextSeq    uint64 `json:"next_seq"`
	HeadLen    int    `json:"head_len"`
	HeadSHA256 string `json:"head_sha256"`
}

func hashHead(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// stateFileName names the checkpoint of one (run id, log path) pair.
func stateFileName(runID, absPath string) string {
	s := sha256.Sum256([]byte(runID + "\x00" + absPath))
	return "logtail-" + hex.EncodeToString(s[:8]) + ".json"
}

// errBadState marks a state file that exists but cannot be used.
var errBadState = errors.New("logtail: unusable state file")

// loadCheckpoint reads the state file. A missing file is (nil, nil).
func loadCheckpoint(statePath, absPath, runID string) (*checkpoint, error) {
	b, err := os.ReadFile(statePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", statePath, err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBadState, statePath, err)
	}
	switch {
	case cp.Version != checkpointVersion:
		return nil, fmt.Errorf("%w: %s: version %d", errBadState, statePath, cp.Version)
	case cp.Path != absPath || cp.RunID != runID:
		return nil, fmt.Errorf("%w: %s: written for path %q run %q", errBadState, statePath, cp.Path, cp.RunID)
	case cp.Offset < 0 || cp.HeadLen < 0 || cp.HeadLen > headBytes || int64(cp.HeadLen) > cp.Offset:
		return nil, fmt.Errorf("%w: %s: offset %d head %d", errBadState, statePath, cp.Offset, cp.HeadLen)
	}
	return &cp, nil
}

// saveCheckpoint writes the state file atomically: a temporary file in the
// same directory, synced, then renamed over the old one.
func saveCheckpoint(statePath string, cp checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	dir := filepath.Dir(statePath)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(statePath)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	name := tmp.Name()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("write state %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("sync state %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("close state %s: %w", name, err)
	}
	if err := os.Rename(name, statePath); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("rename state %s: %w", statePath, err)
	}
	// Make the rename itself durable; a failure here leaves a valid file.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// matches reports whether the open file f (stat fi) is the checkpointed
// file: same identity when byIdentity, first bytes hashing the same, and at
// least Offset bytes long. It returns the first HeadLen bytes.
func (cp *checkpoint) matches(f *os.File, fi os.FileInfo, byIdentity bool) ([]byte, bool) {
	if byIdentity {
		dev, ino := identity(fi)
		if dev != cp.Dev || ino != cp.Ino {
			return nil, false
		}
	}
	if fi.Size() < cp.Offset {
		return nil, false
	}
	head := make([]byte, cp.HeadLen)
	if _, err := f.ReadAt(head, 0); err != nil && !(errors.Is(err, io.EOF) && cp.HeadLen == 0) {
		return nil, false
	}
	if hashHead(head) != cp.HeadSHA256 {
		return nil, false
	}
	return head, true
}

// findRotated looks beside path for the checkpointed file under another
// name that begins with path's name (llama.log.1, llama.log-20250101). A
// file with the checkpoint's identity wins; otherwise the first file, in
// name order, whose first bytes match (a copy made by copytruncate) is
// taken, provided the checkpoint hashed at least one byte. The caller owns
// the returned file.
func findRotated(path string, cp *checkpoint) (f *os.File, name string, head []byte) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", nil
	}
	var (
		hf    *os.File
		hname string
		hhead []byte
	)
	for _, e := range ents {
		n := e.Name()
		if n == base || !strings.HasPrefix(n, base) || !e.Type().IsRegular() {
			continue
		}
		full := filepath.Join(dir, n)
		cf, err := os.Open(full)
		if err != nil {
			continue
		}
		fi, err := cf.Stat()
		if err != nil {
			_ = cf.Close()
			continue
		}
		if h, ok := cp.matches(cf, fi, true); ok {
			if hf != nil {
				_ = hf.Close()
			}
			return cf, full, h
		}
		if hf == nil && cp.HeadLen > 0 {
			if h, ok := cp.matches(cf, fi, false); ok {
				hf, hname, hhead = cf, full, h
				continue
			}
		}
		_ = cf.Close()
	}
	return hf, hname, hhead
}

// sameHead reports whether f still starts with head.
func sameHead(f *os.File, head []byte) bool {
	if len(head) == 0 {
		return true
	}
	b := make([]byte, len(head))
	n, _ := f.ReadAt(b, 0)
	return bytes.Equal(b[:n], head)
}
