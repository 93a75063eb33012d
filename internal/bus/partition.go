package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// PartitionPrefix starts the subjects of the partitioned stream:
// gttsplitp.<partition>.<kind>.<host>.<lane>.<run>.
const PartitionPrefix = "gttsplitp"

// DefaultPartitions is the number of partitions of a new partitioned
// stream.
const DefaultPartitions = 16

// PartitionStream is the name of the partitioned stream of stream.
func PartitionStream(stream string) string { return stream + "_PARTS" }

// PartitionOf returns the partition of a run id among n, as the server's
// partition() subject mapping computes it (FNV-1a 32 of the run token).
func PartitionOf(runID string, n int) int {
	if n <= 0 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(runID))
	return int(h.Sum32() % uint32(n))
}

// PartitionFilter is the subject of one partition's events of a lane
// ("" for every lane).
func PartitionFilter(p int, lane string) string {
	if lane == "" {
		lane = "*"
	}
	return fmt.Sprintf("%s.%d.*.*.%s.*", PartitionPrefix, p, lane)
}

// PartitionSubject is the subject an event published on subject (
// gttsplit.<kind>.<host>.<lane>.<run>) has in the partitioned stream of n
// partitions.
func PartitionSubject(subject string, n int) string {
	toks := strings.Split(subject, ".")
	if len(toks) != 5 {
		return ""
	}
	return fmt.Sprintf("%s.%d.%s.%s.%s.%s", PartitionPrefix, PartitionOf(toks[4], n), toks[1], toks[2], toks[3], toks[4])
}

// PartitionConfig describes the partitioned stream.
type PartitionConfig struct {
	// Stream is the events stream it sources from.
	Stream string
	// Partitions of a new partitioned stream; an existing one keeps its
	// own count.
	Partitions int
	Replicas   int
	MaxAge     time.Duration
	MaxBytes   int64
}

var partitionsRE = regexp.MustCompile(`\{\{\s*partition\(\s*([0-9]+)\s*,`)

// EnsurePartitions makes sure the partitioned stream of cfg.Stream exists:
// it sources the run, log and fdinfo events of the events stream, with the
// server's partition() mapping putting every event of a run in the same
// partition (gttsplitp.<P>.<kind>.<host>.<lane>.<run>). It returns the
// stream's partition count: an existing stream keeps its count (a
// different configured count is a warning) and is never lowered.
func EnsurePartitions(ctx context.Context, js jetstream.JetStream, cfg PartitionConfig, log zerolog.Logger) (int, error) {
	name := PartitionStream(cfg.Stream)
	n := cfg.Partitions
	if n <= 0 {
		n = DefaultPartitions
	}
	var tr []jetstream.SubjectTransformConfig
	for _, k := range []events.Kind{events.KindRun, events.KindLog, events.KindFDInfo} {
		tr = append(tr, jetstream.SubjectTransformConfig{
			Source:      fmt.Sprintf("gttsplit.%s.*.*.*", k),
			Destination: fmt.Sprintf("%s.{{partition(%d,3)}}.%s.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}", PartitionPrefix, n, k),
		})
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	want := jetstream.StreamConfig{
		Name:        name,
		Description: "gttsplit: the run, log and fdinfo events of " + cfg.Stream + ", partitioned by run",
		Sources:     []*jetstream.StreamSource{{Name: cfg.Stream, SubjectTransforms: tr}},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    maxBytes,
		Replicas:    max(cfg.Replicas, 1),
	}
	log = log.With().Str("stream", name).Logger()
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, name)
		} else if err == nil {
			return n, nil
		}
	}
	if err != nil {
		return 0, fmt.Errorf("partitioned stream %s: %w", name, err)
	}
	cur := s.CachedInfo().Config
	have := 0
	for _, src := range cur.Sources {
		for _, t := range src.SubjectTransforms {
			if m := partitionsRE.FindStringSubmatch(t.Destination); m != nil {
				have, _ = strconv.Atoi(m[1])
			}
		}
	}
	if have == 0 {
		return 0, fmt.Errorf("partitioned stream %s exists but has no partition() mapping", name)
	}
	Drift(log, "consumer.partitions", "partitioned stream", have, cfg.Partitions)
	Drift(log, "nats.replicas", "partitioned stream", cur.Replicas, want.Replicas)
	if want.Replicas > cur.Replicas {
		upd := cur
		upd.Replicas = want.Replicas
		if _, err := js.UpdateStream(ctx, upd); err != nil {
			return 0, fmt.Errorf("partitioned stream %s: raise replicas: %w", name, err)
		}
	}
	return have, nil
}
