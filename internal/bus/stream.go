package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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
	// Partitions of a new stream (default DefaultPartitions): the
	// stream stores every event under its run's partition (see
	// partition.go). An existing stream keeps its count.
	Partitions int `mapstructure:"partitions"`
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

// EnsureStream creates the stream when it is missing (file storage, limits
// retention, cfg's limits and replicas, partitioned at ingest: see
// partition.go). An existing stream is never
// lowered: its replicas are raised to cfg.Replicas when fewer, and every
// other difference (fewer replicas asked, another max age, max bytes or
// duplicate window) is logged as a warning naming the setting, keeping the
// server's value: an operator's settings win over a client's defaults.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, log zerolog.Logger) (jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stream config: %w", err)
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	want := jetstream.StreamConfig{
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
		// Every event stored under its run's partition.
		SubjectTransform: partitionTransform(partitionsOr(cfg.Partitions)),
	}
	for attempt := 0; ; attempt++ {
		s, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = js.CreateStream(ctx, want)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && attempt == 0 {
				continue // another client created it meanwhile: read it
			}
			if err != nil {
				return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
			}
			return s, nil
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
		cur := s.CachedInfo().Config
		log = log.With().Str("stream", cfg.Name).Logger()
		upd := cur
		if cfg.Replicas > cur.Replicas {
			upd.Replicas = cfg.Replicas
			log.Info().Int("from", cur.Replicas).Int("to", cfg.Replicas).Msg("nats.replicas: raising the stream's replicas")
		}
		Drift(log, "nats.replicas", "stream", cur.Replicas, cfg.Replicas)
		Drift(log, "nats.stream_max_age", "stream", cur.MaxAge, cfg.MaxAge)
		Drift(log, "nats.stream_max_bytes", "stream", max(cur.MaxBytes, 0), max(maxBytes, 0))
		Drift(log, "nats.duplicate_window", "stream", cur.Duplicates, cfg.DuplicateWindow)
		if upd.Replicas != cur.Replicas {
			if s, err = js.UpdateStream(ctx, upd); err != nil {
				return nil, fmt.Errorf("stream %s: raise replicas to %d: %w", cfg.Name, cfg.Replicas, err)
			}
		}
		return s, nil
	}
}

// Drift logs a warning when what the server has differs from what the
// configuration asks and the server's value is kept (replicas: only when
// the server has more, as fewer are raised).
func Drift[T comparable](log zerolog.Logger, setting, what string, server, config T) {
	if server == config {
		return
	}
	if s, ok := any(server).(int); ok && setting == "nats.replicas" && s < any(config).(int) {
		return // raised by the caller
	}
	log.Warn().Str("setting", setting).Str("of", what).Str("server", fmt.Sprint(server)).Str("config", fmt.Sprint(config)).
		Msg(setting + ": the server's " + what + " differs from the configuration; keeping the server's value (a client never lowers what exists)")
}
