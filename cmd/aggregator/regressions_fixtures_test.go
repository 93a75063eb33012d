package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
)

// The files docs/regressions.md runs its examples on, in
// testdata/regressions (TestRegressionsDocRunsAsPrinted lays them out as
// the page names them):
//
//	baseline.json  the split.json of the 4B command at llama.cpp b9800, a
//	               build without the packed copy (packed 0)
//	builds.jsonl   the splits of that command at b9800 and at b9900 (a
//	               JSON sink's splits.jsonl)
//	splits/        a JSON sink's directory holding the 4B reference run
//	               (b9866, with the packed copy)
//
// The b9800 and b9900 runs are derived from the 4B reference run
// (testdata/runs/4b/events.jsonl) by derivedRun, as the control in
// testdata/controls is: no measurement. `go test ./cmd/aggregator -run
// TestRegressionsFixtures -update` writes them again.
const regressionsDir = "../../testdata/regressions"

// derivedBuild is one derived run of the 4B command.
type derivedBuild struct {
	id      string    // the run id
	started time.Time // the new start; every time moves with it
	build   string    // llama.cpp build number
	commit  string    // its source commit (40 hex digits)
}

var regressionBuilds = []derivedBuild{
	{"strix01-20261105T100000-4b", time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC), "9800", "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"},
	{"strix01-20261110T100000-4b", time.Date(2026, 11, 10, 10, 0, 0, 0, time.UTC), "9900", "5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"},
}

const (
	refRun     = "strix01-20261107T140311-4b"
	refStarted = "2026-11-07T14:03:09Z" // the reference run's start, to the second
	refBuild   = "build 9866 (40f58efe1)"
	refCommit  = "40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f"
	// packedKiB is the packed copy (795.8 MiB) to the KiB below, taken out
	// of the big client's GTT: the peak 3925.0 becomes 3129.2 MiB.
	packedKiB = 814899
	// baseKiB is the runtime's GTT before the model load (260 MiB), which
	// no sample goes below.
	baseKiB = 266240
)

var (
	stamp    = regexp.MustCompile(`2026-11-07T\d\d:\d\d:\d\d(\.\d+)?Z`)
	gttKey   = regexp.MustCompile(`(drm-(?:total|resident|memory)-gtt:(?: |\\t)*)(\d+)(?: (KiB|MiB|GiB))?\\n`)
	traceRe  = regexp.MustCompile(`hrx: host-weight (?:pack|evict) [^"]*`)
	summary  = regexp.MustCompile(`hrx: host-weight summary packed=\d+ resident=[0-9.]+ MiB`)
	usedRe   = regexp.MustCompile(`"gtt_used_bytes":(\d+)`)
	sampleRe = regexp.MustCompile(`"type":"io.gttsplit.fdinfo.sample.v1"`)
)

// derivedRun rewrites the reference run's recorded stream as the same
// command at another build without the packed copy: its id, its times
// (moved together, the start to b.started), the build line and source
// commit; the host-weight trace says nothing was packed (its pack and
// evict lines emptied, the summary packed=0 resident=0.0 MiB: packed is
// 0, not unknown); and every sample's GTT (the process's drm-total,
// -resident and -memory-gtt, and the card's used bytes) is packedKiB
// smaller, but never below the runtime's 260 MiB.
func derivedRun(t *testing.T, ref []byte, b derivedBuild) []byte {
	t.Helper()
	refStart, err := time.Parse(time.RFC3339, refStarted)
	require.NoError(t, err)
	shift := b.started.Sub(refStart)
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(ref), "\n") {
		if line == "" {
			continue
		}
		line = strings.ReplaceAll(line, refRun, b.id)
		line = strings.ReplaceAll(line, refCommit, b.commit)
		line = strings.ReplaceAll(line, refBuild, "build "+b.build+" ("+b.commit[:9]+")")
		line = stamp.ReplaceAllStringFunc(line, func(s string) string {
			ts, err := time.Parse(time.RFC3339Nano, s)
			require.NoError(t, err)
			return ts.Add(shift).Format(time.RFC3339Nano)
		})
		line = traceRe.ReplaceAllString(line, "")
		line = summary.ReplaceAllString(line, "hrx: host-weight summary packed=0 resident=0.0 MiB")
		if sampleRe.MatchString(line) {
			line = lessGTT(t, line)
		}
		out.WriteString(line)
	}
	return out.Bytes()
}

// lessGTT takes the packed copy out of a sample event's GTT figures; the
// card's used bytes drop by what its biggest client's total dropped.
func lessGTT(t *testing.T, line string) string {
	t.Helper()
	drop := 0
	line = gttKey.ReplaceAllStringFunc(line, func(s string) string {
		m := gttKey.FindStringSubmatch(s)
		v, err := strconv.Atoi(m[2])
		require.NoError(t, err)
		kib := map[string]int{"": v / 1024, "KiB": v, "MiB": v << 10, "GiB": v << 20}[m[3]]
		n := max(kib-packedKiB, min(kib, baseKiB))
		if n == kib {
			return s
		}
		if strings.HasPrefix(m[1], "drm-total-gtt") {
			drop = max(drop, kib-n)
		}
		return fmt.Sprintf("%s%d KiB\\n", m[1], n)
	})
	return usedRe.ReplaceAllStringFunc(line, func(s string) string {
		v, err := strconv.Atoi(usedRe.FindStringSubmatch(s)[1])
		require.NoError(t, err)
		return fmt.Sprintf(`"gtt_used_bytes":%d`, v-drop<<10)
	})
}

// regressionFixtures returns the files of testdata/regressions, by path
// relative to it, as the aggregator writes them from the reference run
// and the derived ones.
func regressionFixtures(t *testing.T) map[string][]byte {
	t.Helper()
	ref, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "testdata", "runs", "4b", "events.jsonl"))
	require.NoError(t, err)
	dir := t.TempDir()
	replay := func(name string, stream []byte) string {
		in := filepath.Join(dir, name+".jsonl")
		require.NoError(t, os.WriteFile(in, stream, 0o644))
		out := filepath.Join(dir, name)
		var stdout, stderr bytes.Buffer
		root := newRoot(&stdout, &stderr)
		root.SetArgs([]string{"replay", "--format", "json", "--json-dir", out, in})
		require.NoError(t, root.Execute(), stderr.String())
		return out
	}
	files := map[string][]byte{}
	var builds []byte
	for i, b := range regressionBuilds {
		out := replay(b.id, derivedRun(t, ref, b))
		lines, err := os.ReadFile(filepath.Join(out, "splits.jsonl"))
		require.NoError(t, err)
		builds = append(builds, lines...)
		if i == 0 {
			files["baseline.json"], err = os.ReadFile(filepath.Join(out, "strix01", "gpu0", b.id+".json"))
			require.NoError(t, err)
		}
	}
	files["builds.jsonl"] = builds
	out := replay("ref", ref)
	for _, rel := range []string{"splits.jsonl", filepath.Join("strix01", "gpu0", refRun+".json")} {
		files[filepath.Join("splits", rel)], err = os.ReadFile(filepath.Join(out, rel))
		require.NoError(t, err)
	}
	return files
}

// TestRegressionsFixtures: testdata/regressions holds what the aggregator
// writes from the runs it is derived from (-update writes it again).
func TestRegressionsFixtures(t *testing.T) {
	want := regressionFixtures(t)
	for rel, b := range want {
		path := filepath.Join(regressionsDir, rel)
		if *update {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, b, 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "go test ./cmd/aggregator -run TestRegressionsFixtures -update writes it")
		require.Equal(t, string(b), string(got), "%s is stale: go test ./cmd/aggregator -run TestRegressionsFixtures -update", path)
	}
	// The baseline has the packed copy at 0 (not unknown), the other runs
	// of the page its two builds.
	base := string(want["baseline.json"])
	require.Contains(t, base, `"packed_mib": 0,`)
	require.Contains(t, base, `"llama_build": "b9800 (1a2b3c4d5)"`)
	require.Contains(t, base, `"peak_gtt_mib": 3129.2,`)
	require.Contains(t, string(want["builds.jsonl"]), `"llama_build":"b9900 (5e6f70819)"`)
}
