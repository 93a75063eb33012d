// Package safefs turns foreign strings (host, lane and run ids that arrive
// over the network) into file names that stay inside a sink's directory,
// and writes files there atomically.
package safefs

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
)

const (
	// maxBase is the longest kept prefix of a component, in bytes; with the
	// hash suffix and an extension a name stays far below 255 bytes.
	maxBase = 96
	// hashLen is the number of hex digits of the disambiguating hash.
	hashLen = 12
	// sep starts the hash suffix. It is never kept from the input, so a
	// component that was changed cannot equal one that was not.
	sep = '+'
)

// Component returns a single safe path component for s: letters, digits,
// '-', '_' and '.', not starting with '.', at most about 110 bytes. A
// string already in that form (and not in reserved) is returned unchanged,
// so readable ids stay readable. Anything else has its unsafe bytes
// replaced by '_', a leading '.' replaced, its length capped, and
// "+<12 hex digits of sha256(s)>" appended, so distinct inputs give distinct
// names. The empty string gives "unknown+".
func Component(s string, reserved ...string) string {
	if s == "" {
		return "unknown" + string(sep)
	}
	b := []byte(s)
	changed := false
	for i, c := range b {
		if !safe(c) {
			b[i] = '_'
			changed = true
		}
	}
	if b[0] == '.' {
		b[0] = '_'
		changed = true
	}
	if len(b) > maxBase {
		b = b[:maxBase]
		changed = true
	}
	out := string(b)
	for _, r := range reserved {
		if out == r {
			changed = true
		}
	}
	if !changed {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	return out + string(sep) + hex.EncodeToString(sum[:])[:hashLen]
}

func safe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// LinesFile is the JSON sink's append-only file at the top of its
// directory. File and JSON sinks may share a directory, so no host
// directory may take this name.
const LinesFile = "splits.jsonl"

// RunPath returns "<host>/<lane>/<run><ext>" with every component made safe
// by Component; a host named LinesFile is renamed.
func RunPath(host, lane, run, ext string) string {
	return path.Join(Component(host, LinesFile), Component(lane), Component(run)+ext)
}

// OpenRoot creates dir (and its parents) if needed, checks that a file can
// be created in it, and opens it as a root that no later file name can
// escape, symbolic links included. Its errors name dir and the cause.
func OpenRoot(dir string) (*os.Root, error) {
	if dir == "" {
		return nil, errors.New("empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create directory %q: %w", dir, unwrapPath(err))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot open directory %q: %w", dir, unwrapPath(err))
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	probe := ".write-check." + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := root.OpenFile(probe, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("cannot write in directory %q: %w", dir, unwrapPath(err))
	}
	_ = f.Close()
	_ = root.Remove(probe)
	return root, nil
}

// unwrapPath drops the operation and path of a *fs.PathError, which would
// repeat what the caller's message already says.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// WriteAtomic replaces name (slash-separated, relative to root) with data:
// it writes a temporary file in the same directory, syncs it, renames it
// over name and syncs the directory. Readers see the old or the new content,
// never a mix. Temporary names start with '.', which Component never
// produces. Batch is the same for several files with one sync for all.
func WriteAtomic(root *os.Root, name string, data []byte) (err error) {
	tmp, f, err := writeTemp(root, File{Name: name, Data: data}, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = root.Remove(tmp)
		}
	}()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		return fmt.Errorf("rename %s: %w", name, err)
	}
	return SyncDir(root, path.Dir(name))
}

// writeTemp creates the directory of file.Name (unless made says it was)
// and a new temporary file beside it, named ".<base>.<random>.tmp", and
// writes file.Data to it. On success the caller owns the open file; on an
// error nothing is left behind.
func writeTemp(root *os.Root, file File, made map[string]bool) (tmp string, f *os.File, err error) {
	dir, base := path.Split(file.Name)
	if dir == "" {
		dir = "."
	}
	if !made[dir] {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("create directory %s: %w", dir, err)
		}
		if made != nil {
			made[dir] = true
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp = path.Join(dir, "."+base+"."+hex.EncodeToString(rnd[:])+".tmp")
	f, err = root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", nil, fmt.Errorf("create temporary file for %s: %w", file.Name, err)
	}
	if _, err := f.Write(file.Data); err != nil {
		_ = f.Close()
		_ = root.Remove(tmp)
		return "", nil, fmt.Errorf("write %s: %w", file.Name, err)
	}
	return tmp, f, nil
}

// SyncDir fsyncs a directory so a rename or create in it is durable.
func SyncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// File is one file of a batch: its name (slash-separated, relative to the
// root) and its content.
type File struct {
	Name string
	Data []byte
}

// Batch writes several files atomically with one commit to durable
// storage for them all (group commit), in two steps so the caller can
// decide between them: Stage writes each file's content to a temporary
// file beside it and makes them durable together; Commit renames the kept
// ones over their names and makes the renames durable. Readers see each
// file's old or new content, never a mix.
type Batch struct {
	root  *os.Root
	files []File
	tmps  []string
	dirs  map[string]bool
}

// Stage writes the temporary files of files and makes them durable with
// one sync of the file system (one fsync per file where the system has no
// syncfs).
func Stage(root *os.Root, files []File) (b *Batch, err error) {
	b = &Batch{root: root, files: files, dirs: map[string]bool{}}
	defer func() {
		if err != nil {
			b.Abort()
		}
	}()
	var toSync []*os.File
	defer func() {
		for _, f := range toSync {
			_ = f.Close()
		}
	}()
	for _, f := range files {
		tmp, fh, err := writeTemp(root, f, b.dirs)
		if err != nil {
			return b, err
		}
		b.tmps = append(b.tmps, tmp)
		toSync = append(toSync, fh)
	}
	if err := syncAll(root, toSync); err != nil {
		return b, err
	}
	return b, nil
}

// Commit renames the temporary files whose keep is true (nil: all) over
// their names, removes the others, and makes the renames durable with one
// sync of the file system.
func (b *Batch) Commit(keep []bool) error {
	var errs []error
	for i, f := range b.files {
		if keep != nil && !keep[i] {
			_ = b.root.Remove(b.tmps[i])
			continue
		}
		if err := b.root.Rename(b.tmps[i], f.Name); err != nil {
			_ = b.root.Remove(b.tmps[i])
			errs = append(errs, fmt.Errorf("rename %s: %w", f.Name, err))
		}
	}
	b.tmps = nil
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return SyncFS(b.root, b.dirNames())
}

// Abort removes the temporary files.
func (b *Batch) Abort() {
	for _, t := range b.tmps {
		_ = b.root.Remove(t)
	}
	b.tmps = nil
}

func (b *Batch) dirNames() []string {
	out := make([]string, 0, len(b.dirs))
	for d := range b.dirs {
		out = append(out, d)
	}
	return out
}
