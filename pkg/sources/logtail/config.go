package logtail

import (
	"errors"
	"fmt"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
)

// component names the source in its log lines and errors.
const component = "logtail"

// Config configures one log follower; no key sets it (collector attach
// fills it from attach.*). The zero value is not usable: start from
// DefaultConfig and set Path (and usually StateDir, RunID and Done). How
// lines are batched is sources.Settings.Batch.
type Config struct {
	// Path is the log file to follow, e.g. llama-server's --log-file. It
	// need not exist yet: the follower waits for it.
	Path string
	// StateDir holds the checkpoint file. It is created when missing. Empty
	// disables checkpointing: every start reads Path from offset 0 and
	// numbers lines from FirstSeq.
	StateDir string
	// RunID names the checkpoint together with Path, so two runs that follow
	// the same path keep separate positions.
	RunID string
	// Stream is the split.Line.Stream of every emitted line.
	Stream string
	// FirstSeq is the Seq of the first line of a run that has no
	// checkpoint. A checkpoint's next sequence number wins over it.
	FirstSeq uint64
	// PollInterval is how often the file is checked for appends, rotation
	// and truncation.
	PollInterval time.Duration
	// MaxLineBytes cuts a longer line into pieces of this size, each
	// emitted as a line of its own, so a runaway line cannot exhaust memory.
	MaxLineBytes int
	// FlushPartialOnDone emits a last line that has no newline when Done
	// closes. When false, it is left in the file, and the checkpoint stays
	// before it.
	FlushPartialOnDone bool
	// AckWait is how long Run, after Done closed and the last lines were
	// emitted, waits for the downstream to acknowledge them so that the
	// checkpoint covers them. 0 returns at once.
	AckWait time.Duration
	// OnlyCheckpointedFile, with a checkpoint, reads only the file it
	// names (device and inode, wherever it was renamed, or a copy that
	// copytruncate left): a file at Path that is another is not read. It
	// is for a writer known to be gone that never reopened its log
	// (llama-server opens its --log-file once): another file at Path is
	// another writer's (a process started since), not its lines. The
	// checkpointed file itself truncated and rewritten in place (by
	// copytruncate, or by a process that opened the same path) is read
	// from its start as usual: the two are not told apart. Without a
	// checkpoint Path is read as usual.
	OnlyCheckpointedFile bool
	// Done, when closed, means the writer of the log is gone (the attached
	// process exited): Run reads the file to its end, emits what is left
	// and returns nil. Nil means never.
	Done <-chan struct{}
}

// DefaultConfig returns a follower's defaults (no Path).
func DefaultConfig() Config {
	return Config{
		Stream:             "log",
		FirstSeq:           1,
		PollInterval:       200 * time.Millisecond,
		MaxLineBytes:       sources.MaxLineBytes,
		FlushPartialOnDone: true,
		AckWait:            5 * time.Second,
	}
}

// Validate reports every problem of the config at once, each prefixed with
// its key. It touches neither the file nor the state directory.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, msg string) { errs = append(errs, fmt.Errorf("%s: %s", key, msg)) }
	if c.Path == "" {
		bad("path", "must not be empty")
	}
	if c.Stream == "" {
		bad("stream", "must not be empty")
	}
	if c.PollInterval <= 0 {
		bad("poll_interval", "must be positive")
	}
	if c.MaxLineBytes < 1 {
		bad("max_line_bytes", "must be at least 1")
	}
	if c.AckWait < 0 {
		bad("ack_wait", "must not be negative")
	}
	return errors.Join(errs...)
}

// New builds a follower of cfg.Path, batching its lines as set.Batch says.
func New(cfg Config, set sources.Settings) (sources.Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: invalid config: %w", component, err)
	}
	return newFollower(cfg, set), nil
}
