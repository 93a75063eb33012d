// Package provenance reads what a measurement was taken from: the git
// commit of the measured source tree and whether the tree was clean.
package provenance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Tree is the state of a source tree.
type Tree struct {
	Dir    string
	Commit string // full hash; "" when dir is not a git checkout
	// CommitTime is the commit's committer time (zero when git did not
	// say): it orders two builds of one llama.cpp build number.
	CommitTime time.Time
	// Dirty is nil when unknown, else whether `git status --porcelain`
	// listed anything (untracked files included).
	Dirty *bool
}

// ErrNotGit means dir is not inside a git work tree (or git is missing).
var ErrNotGit = errors.New("not a git checkout")

// ReadTree asks git about dir. It runs `git rev-parse HEAD`, `git show -s
// --format=%cI HEAD` (the commit's time) and `git status --porcelain`,
// bounded by a timeout.
func ReadTree(ctx context.Context, dir string) (Tree, error) {
	t := Tree{Dir: dir}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return t, fmt.Errorf("%w: %s: %w", ErrNotGit, dir, err)
	}
	t.Commit = strings.TrimSpace(out)
	if ct, err := git(ctx, dir, "show", "-s", "--format=%cI", "HEAD"); err == nil {
		if tm, err := time.Parse(time.RFC3339, strings.TrimSpace(ct)); err == nil {
			t.CommitTime = tm.UTC()
		}
	}
	st, err := git(ctx, dir, "status", "--porcelain")
	if err != nil {
		return t, nil // commit known, cleanliness unknown
	}
	d := strings.TrimSpace(st) != ""
	t.Dirty = &d
	return t, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg != "" {
			return "", fmt.Errorf("git %s: %s", args[0], msg)
		}
		return "", fmt.Errorf("git %s: %w", args[0], err)
	}
	return out.String(), nil
}
