package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultStream is the name of the stream that holds every gttsplit event.
const DefaultStream = "GTTSPLIT"

// MinDuplicateWindow is the shortest duplicate window EnsureStream accepts:
// a collector restarted within it re-publishes without duplicating.
const MinDuplicateWindow = 2 * time.Minute

// StreamConfig describes the JetStream stream.
type StreamConfig struct {
	// Name of the stream (default GTTSPLIT).
	Name string `mapstructure:"name"`
	// Subjects bound to it (default gttsplit.>).
	Subjects []string `mapstructure:"subjects"`
	// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values
	// to drop re-sent events (default and minimum 2m).
	DuplicateWindow time.Duration `mapstructure:"duplicate_window"`
	// MaxAge discards events older than this (0: keep for ever).
	MaxAge time.Duration `mapstructure:"max_age"`
	// MaxBytes bounds the stream's size, oldest events go first (0: no
	// limit).
	MaxBytes int64 `mapstructure:"max_bytes"`
	// Replicas in a cluster (default 1).
	Replicas int `mapstructure:"replicas"`
}

// DefaultStreamConfig returns the defaults.
func DefaultStreamConfig() StreamConfig {
	return StreamConfig{
		Name:            DefaultStream,
		Subjects:        []string{events.StreamSubjects},
		DuplicateWindow: MinDuplicateWindow,
		Replicas:        1,
	}
}

// Validate reports every problem at once, each prefixed with its key.
func (c StreamConfig) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name: must not be empty"))
	}
	if len(c.Subjects) == 0 {
		errs = append(errs, errors.New("subjects: must not be empty"))
	}
	if c.DuplicateWindow < MinDuplicateWindow {
		errs = append(errs, fmt.Errorf("duplicate_window: must be at least %s", MinDuplicateWindow))
	}
	if c.MaxAge < 0 {
		errs = append(errs, errors.New("max_age: must not be negative"))
	} else if c.MaxAge > 0 && c.MaxAge < c.DuplicateWindow {
		errs = append(errs, errors.New("max_age: must not be shorter than duplicate_window"))
	}
	if c.MaxBytes < 0 {
		errs = append(errs, errors.New("max_bytes: must not be negative"))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, errors.New("replicas: must be 1 to 5"))
	}
	return errors.Join(errs...)
}

// EnsureStream creates the stream, or updates an existing one to cfg (file
// storage, limits retention).
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stream config: %w", err)
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: "gttsplit CloudEvents",
		Subjects:    cfg.Subjects,
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Duplicates:  cfg.DuplicateWindow,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    maxBytes,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return s, nil
}
