package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// The events stream is partitioned at ingest: the stream's own subject
// transform stores an event published on
//
//	gttsplit.<kind>.<host>.<lane>.<run>
//
// as
//
//	gttsplit.<kind>.<partition>.<host>.<lane>.<run>
//
// where the partition is the server's partition() of the run token (FNV-1a
// of the token, modulo the partition count). Every event is stored once;
// an aggregator consumes a partition through a consumer filtered on it.
// Publishers keep publishing the five-token subjects: the transform is the
// server's.

// DefaultPartitions is the partition count of a new events stream.
const DefaultPartitions = 16

// partitionRE reads the partition count back from a transform.
var partitionRE = regexp.MustCompile(`\{\{\s*partition\(\s*([0-9]+)\s*,`)

// partitionTransform is the events stream's subject transform for n
// partitions.
func partitionTransform(n int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      events.SubjectRoot + ".*.*.*.*",
		Destination: fmt.Sprintf("%s.{{wildcard(1)}}.{{partition(%d,4)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}", events.SubjectRoot, n),
	}
}

// transformPartitions returns the partition count of a stream's
// transform, and whether it has one.
func transformPartitions(cfg jetstream.StreamConfig) (int, bool) {
	if cfg.SubjectTransform == nil {
		return 0, false
	}
	m := partitionRE.FindStringSubmatch(cfg.SubjectTransform.Destination)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil && n > 0
}

// PartitionOf returns the partition of a run among n, as the server's
// partition() computes it from the run's subject token.
func PartitionOf(runID string, n int) int {
	if n <= 0 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(events.Token(runID)))
	return int(h.Sum32() % uint32(n))
}

// folded are the kinds an aggregator folds.
var folded = []events.Kind{events.KindRun, events.KindLog, events.KindFDInfo}

// PartitionFilters are the subject filters of partition p's events of a
// lane ("" for every lane): one filter of every kind, six tokens exactly
// (an event stored before the stream was partitioned has five). One
// wildcard filter costs the server much less than one filter per folded
// kind (BenchmarkPartitionFilters: 1.6× less CPU for the walk past the
// other partitions' messages); the consumer skips the kinds it does not
// fold (Folded).
func PartitionFilters(p int, lane string) []string {
	if lane == "" {
		lane = "*"
	} else {
		lane = events.Token(lane)
	}
	return []string{fmt.Sprintf("%s.*.%d.*.%s.*", events.SubjectRoot, p, lane)}
}

// Folded says whether a stored subject is an event the aggregator folds
// (run, log or fdinfo), not a split or a dead letter.
func Folded(subject string) bool {
	rest, ok := strings.CutPrefix(subject, events.SubjectRoot+".")
	if !ok {
		return false
	}
	kind, _, _ := strings.Cut(rest, ".")
	return slices.Contains(folded, events.Kind(kind))
}

// Unfolded says whether a stored subject is of a kind the aggregator
// knows and does not fold: a split or a dead letter. A subject neither
// Folded nor Unfolded is of a kind it does not know.
func Unfolded(subject string) bool {
	rest, ok := strings.CutPrefix(subject, events.SubjectRoot+".")
	if !ok {
		return false
	}
	kind, _, _ := strings.Cut(rest, ".")
	return events.Kind(kind) == events.KindSplit || events.Kind(kind) == events.KindDLQ
}

// StoredFilters are the subject filters of the stored events of a kind,
// host, lane and run ("" for any): the partitioned form and, for events
// stored before the stream was partitioned, the five-token form (the two
// never overlap).
func StoredFilters(kind events.Kind, host, lane, runID string) []string {
	k := "*"
	if kind != "" {
		k = string(kind)
	}
	if host == "" && lane == "" && runID == "" {
		return []string{events.SubjectRoot + "." + k + ".>"}
	}
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return events.Token(v)
	}
	h, l, r := tok(host), tok(lane), tok(runID)
	return []string{
		strings.Join([]string{events.SubjectRoot, k, "*", h, l, r}, "."),
		strings.Join([]string{events.SubjectRoot, k, h, l, r}, "."),
	}
}

// PublishedSubject returns the subject an event was published on, from the
// subject it is stored under (the partition token dropped); other subjects
// are returned as they are.
func PublishedSubject(stored string) string {
	toks := strings.Split(stored, ".")
	switch {
	case len(toks) == 6 && toks[0] == events.SubjectRoot:
		return strings.Join(append(toks[:2:2], toks[3:]...), ".")
	case len(toks) == 6 && toks[0] == legacyPrefix:
		return events.SubjectRoot + "." + strings.Join(toks[2:], ".")
	}
	return stored
}

// The partitioned stream of earlier versions (<stream>_PARTS, subjects
// gttsplitp.<partition>.<kind>.<host>.<lane>.<run>), a sourced copy of the
// events stream. An aggregator finding it drains it (each partition's
// owner consumes both) and deletes it once nothing is left in it; it never
// creates one (its credential may not: see internal/natsauth).
const legacyPrefix = "gttsplitp"

// LegacyStream is the name of the earlier versions' partitioned stream.
func LegacyStream(stream string) string { return stream + "_PARTS" }

// LegacyFilter is the filter of partition p's events of a lane in the
// legacy stream.
func LegacyFilter(p int, lane string) string {
	if lane == "" {
		lane = "*"
	} else {
		lane = events.Token(lane)
	}
	return fmt.Sprintf("%s.%d.*.*.%s.*", legacyPrefix, p, lane)
}

// Layout is how an aggregator found the events stream.
type Layout struct {
	// Partitions is the stream's partition count.
	Partitions int
	// Legacy says the earlier versions' partitioned stream is still there
	// to drain.
	Legacy bool
	// Unfolded counts the events stored before the stream was partitioned
	// when no earlier partitioned stream is there to fold them through
	// (set only when EnsurePartitioned partitioned the stream).
	Unfolded uint64
}

// EnsurePartitioned makes sure the events stream stores its events by
// partition (see above) and returns its layout. A stream created before
// partitioning at ingest gets the transform now (with the legacy
// stream's partition count, if there is one, else partitions): events
// stored before keep their subjects and are folded through the legacy
// stream when earlier versions left one, which is deleted once drained
// (RetireLegacy). Without one, such events are not folded by the
// partitions' consumers: the layout counts them (Unfolded) and a warning
// says how to fold them (`aggregator export` them, `aggregator replay`
// the file).
func EnsurePartitioned(ctx context.Context, js jetstream.JetStream, stream string, partitions, replicas int, log zerolog.Logger) (Layout, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return Layout{}, fmt.Errorf("events stream %s: %w", stream, err)
	}
	cfg := s.CachedInfo().Config
	if n, ok := transformPartitions(cfg); ok {
		Drift(log.With().Str("stream", stream).Logger(), "consumer.partitions", "events stream", n, partitionsOr(partitions))
		legacy, err := legacyExists(ctx, js, stream)
		return Layout{Partitions: n, Legacy: legacy}, err
	}
	if cfg.SubjectTransform != nil {
		return Layout{}, fmt.Errorf("events stream %s has a subject transform of its own (%s → %s); gttsplit partitions it with one: remove it",
			stream, cfg.SubjectTransform.Source, cfg.SubjectTransform.Destination)
	}
	n := partitionsOr(partitions)
	lay := Layout{}
	if ls, err := js.Stream(ctx, LegacyStream(stream)); err == nil {
		lay.Legacy = true
		if ln, ok := legacyPartitions(ls.CachedInfo().Config); ok {
			n = ln
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return Layout{}, fmt.Errorf("stream %s: %w", LegacyStream(stream), err)
	} else if lay.Unfolded, err = unpartitioned(ctx, s); err != nil {
		return Layout{}, err
	}
	cfg.SubjectTransform = partitionTransform(n)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return Layout{}, fmt.Errorf("events stream %s: partition at ingest: %w", stream, err)
	}
	lay.Partitions = n
	log.Info().Str("stream", stream).Int("partitions", n).Bool("legacy", lay.Legacy).
		Msg("events stream now partitions its events at ingest; earlier events are folded through the earlier partitioned stream until it is drained")
	if lay.Unfolded > 0 {
		log.Warn().Str("stream", stream).Uint64("events", lay.Unfolded).
			Msg("the events stream holds events stored before it was partitioned, and no earlier partitioned stream to fold them through: they are not folded (fold them with `aggregator export --since TIME > old.jsonl` and `aggregator replay old.jsonl`)")
	}
	return lay, nil
}

// StreamPartitions returns the partition count of the events stream
// (DefaultPartitions for one not partitioned yet).
func StreamPartitions(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("events stream %s: %w", stream, err)
	}
	if n, ok := transformPartitions(s.CachedInfo().Config); ok {
		return n, nil
	}
	if ls, err := js.Stream(ctx, LegacyStream(stream)); err == nil {
		if n, ok := legacyPartitions(ls.CachedInfo().Config); ok {
			return n, nil
		}
	}
	return DefaultPartitions, nil
}

func partitionsOr(n int) int {
	if n <= 0 {
		return DefaultPartitions
	}
	return n
}

// unpartitioned counts the events of the stream stored before
// partitioning (five-token subjects of the folded kinds).
func unpartitioned(ctx context.Context, s jetstream.Stream) (uint64, error) {
	var fs []string
	for _, k := range folded {
		fs = append(fs, fmt.Sprintf("%s.%s.*.*.*", events.SubjectRoot, k))
	}
	c, drop, err := Ordered(ctx, s, jetstream.OrderedConsumerConfig{FilterSubjects: fs, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, fmt.Errorf("events stream: count unpartitioned events: %w", err)
	}
	defer drop()
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("events stream: count unpartitioned events: %w", err)
	}
	return info.NumPending, nil
}

func legacyExists(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	_, err := js.Stream(ctx, LegacyStream(stream))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	}
	return false, fmt.Errorf("stream %s: %w", LegacyStream(stream), err)
}

func legacyPartitions(cfg jetstream.StreamConfig) (int, bool) {
	for _, src := range cfg.Sources {
		for _, t := range src.SubjectTransforms {
			if m := partitionRE.FindStringSubmatch(t.Destination); m != nil {
				n, err := strconv.Atoi(m[1])
				return n, err == nil && n > 0
			}
		}
	}
	return 0, false
}

// RetireLegacy deletes the legacy stream once it has sourced everything
// there is and every partition's consumer of group has acknowledged all
// of it; it reports whether the stream is gone.
func RetireLegacy(ctx context.Context, js jetstream.JetStream, stream, group string, n int) (bool, error) {
	ls, err := js.Stream(ctx, LegacyStream(stream))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	info, err := ls.Info(ctx)
	if err != nil {
		return false, err
	}
	for _, src := range info.Sources {
		if src.Lag > 0 || src.Error != nil {
			return false, nil
		}
	}
	for p := 0; p < n; p++ {
		c, err := ls.Consumer(ctx, ConsumerName(group, p))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			if info.State.Msgs == 0 {
				continue
			}
			return false, nil
		}
		if err != nil {
			return false, err
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return false, err
		}
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			return false, nil
		}
	}
	if err := js.DeleteStream(ctx, LegacyStream(stream)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, err
	}
	return true, nil
}

// ConsumerName is the durable consumer of partition p of group.
func ConsumerName(group string, p int) string { return fmt.Sprintf("%s-p%02d", group, p) }
