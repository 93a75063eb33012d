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

// MinDuplicateWindow is the shortest nats.duplicate_window (Config.Validate):
// a collector restarted within it re-publishes without duplicating.
const MinDuplicateWindow = 2 * time.Minute

// StreamConfig is the JetStream stream EnsureStream makes sure of
// (Config.StreamConfig derives it from the nats.* keys). A zero Name is
// DefaultStream, zero Subjects gttsplit.>, a zero DuplicateWindow
// MinDuplicateWindow, zero Replicas 1, zero Partitions DefaultPartitions.
type StreamConfig struct {
	Name     string
	Subjects []string
	// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values
	// to drop re-sent events.
	DuplicateWindow time.Duration
	// MaxAge discards events older than this (0: keep for ever).
	MaxAge time.Duration
	// MaxBytes bounds the stream's size (0: no limit). A full stream
	// refuses new events (discard new): publishers spool them and try
	// again, and no event is discarded unread.
	MaxBytes int64
	// Replicas in a cluster.
	Replicas int
	// Partitions of a new stream: the stream stores every event under
	// its run's partition (see partition.go). An existing stream keeps
	// its count.
	Partitions int
}

// DefaultStreamConfig returns the defaults, as the zero StreamConfig
// means them.
func DefaultStreamConfig() StreamConfig { return StreamConfig{}.withDefaults() }

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Name == "" {
		c.Name = DefaultStream
	}
	if len(c.Subjects) == 0 {
		c.Subjects = []string{events.StreamSubjects}
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = MinDuplicateWindow
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c
}

// EnsureStream creates the stream when it is missing (file storage, limits
// retention, discard new, cfg's limits and replicas, partitioned at
// ingest: see partition.go; no message deleted or purged through the API,
// which the server lets no update undo). An existing stream is never
// lowered: its replicas are raised to cfg.Replicas when fewer, and every
// other difference (fewer replicas asked, another max age, max bytes or
// duplicate window) is logged as a warning naming the setting, keeping the
// server's value: an operator's settings win over a client's defaults. An
// existing stream that discards its oldest events at a size or count limit
// is said at WARN too: it may discard events no aggregator read yet.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, log zerolog.Logger) (jetstream.Stream, error) {
	cfg = cfg.withDefaults()
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
		// At max_bytes new events are refused (a publisher spools them
		// and tries again) rather than old ones dropped, read or not.
		Discard:    jetstream.DiscardNew,
		Duplicates: cfg.DuplicateWindow,
		MaxAge:     cfg.MaxAge,
		MaxBytes:   maxBytes,
		Replicas:   cfg.Replicas,
		// Every event stored under its run's partition.
		SubjectTransform: partitionTransform(partitionsOr(cfg.Partitions)),
		// Nobody deletes or purges events (nor rolls them up): only the
		// limits above discard them. The server never lets an update
		// undo either.
		DenyDelete: true,
		DenyPurge:  true,
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
		if cur.Discard == jetstream.DiscardOld && (cur.MaxBytes > 0 || cur.MaxMsgs > 0) {
			log.Warn().Str("setting", "nats.stream_max_bytes").Int64("max_bytes", cur.MaxBytes).Int64("max_msgs", cur.MaxMsgs).
				Msg("the events stream discards its oldest events when it is full, whether an aggregator read them or not: those runs lose events without a trace; make it refuse new ones instead (publishers spool them): nats stream edit " + cfg.Name + " --discard new")
		}
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
