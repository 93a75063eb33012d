package bus

import (
	"context"
	"encoding/json"
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

// SourceStall is how long the partitioned stream may go without hearing
// from its source (the source sends a heartbeat every second, data or
// not) before ReattachStalledSource steps in.
const SourceStall = 3 * time.Second

// ReattachStalledSource re-attaches the partitioned stream's source when
// it stalled. When the node leading the events stream goes away, the
// consumer that feeds the partitioned stream often goes with it (when it
// lived there), and the server notices only after 10–20 s without
// contact: no event reaches any partition meanwhile. When the source has been silent for longer than
// stall and the events stream has a leader again, this asks the
// partitioned stream's leader to step down; the next leader sets its
// source up at once, from the message after the last one it holds. It
// returns what it did ("" when nothing was needed). A partitioned stream
// with one replica cannot step down; it is left to the server.
func ReattachStalledSource(ctx context.Context, js jetstream.JetStream, stream string, stall time.Duration) (string, error) {
	name := PartitionStream(stream)
	ps, err := js.Stream(ctx, name)
	if err != nil {
		return "", fmt.Errorf("partitioned stream %s: %w", name, err)
	}
	info := ps.CachedInfo()
	var silent time.Duration
	for _, s := range info.Sources {
		if s.Name == stream && s.Active > stall {
			silent = s.Active
		}
	}
	if silent == 0 || info.Config.Replicas <= 1 || info.Cluster == nil || info.Cluster.Leader == "" {
		return "", nil
	}
	es, err := js.Stream(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("events stream %s: %w", stream, err)
	}
	if ci := es.CachedInfo().Cluster; ci == nil || ci.Leader == "" {
		return "", nil // no leader to source from yet
	}
	resp, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, nil)
	if err != nil {
		return "", fmt.Errorf("partitioned stream %s: step down: %w", name, err)
	}
	var r struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return "", fmt.Errorf("partitioned stream %s: step down: %w", name, err)
	}
	if r.Error != nil || !r.Success {
		d := "no success"
		if r.Error != nil {
			d = r.Error.Description
		}
		return "", fmt.Errorf("partitioned stream %s: step down: %s", name, d)
	}
	return fmt.Sprintf("source %s silent for %s: leader %s of %s stepped down", stream, silent.Round(100*time.Millisecond), info.Cluster.Leader, name), nil
}
