package split

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuildNumberAndCommit(t *testing.T) {
	for _, tc := range []struct {
		build  string
		n      int64
		ok     bool
		commit string
	}{
		{"b9866 (40f58efe1)", 9866, true, "40f58efe1"},
		{"b10524 (9ee9fc04c, 0.1.2-dev)", 10524, true, "9ee9fc04c"},
		{"b4000 (e6e7c75d)", 4000, true, "e6e7c75d"},
		{"b12", 12, true, ""},
		{"", 0, false, ""},
		{"b", 0, false, ""},
		{"build unknown", 0, false, ""},
		{"b12x (abc)", 0, false, "abc"},
		{"9866 (40f58efe1)", 0, false, "40f58efe1"},
	} {
		n, ok := BuildNumber(tc.build)
		require.Equal(t, tc.ok, ok, tc.build)
		require.Equal(t, tc.n, n, tc.build)
		require.Equal(t, tc.commit, BuildCommit(tc.build), tc.build)
	}
}

func TestModelName(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Report
		want string
	}{
		{"the main load's file", Report{Models: []ModelLoad{{Role: "draft", File: "d/draft.gguf"}, {Role: "main", File: "models/main.gguf"}}, Run: RunMeta{Command: "llama-cli -m other.gguf"}}, "main.gguf"},
		{"-m", Report{Run: RunMeta{Command: "llama-cli -m /m/x.gguf -ngl 99"}}, "x.gguf"},
		{"--model=", Report{Run: RunMeta{Command: "llama-server --model=/m/y.gguf"}}, "y.gguf"},
		{"none", Report{Run: RunMeta{Command: "llama-server -hf org/repo"}}, ""},
	} {
		require.Equal(t, tc.want, ModelName(tc.r), tc.name)
	}
}

// The 4B run's figures: what the run index keeps of it, and their JSON
// (unknown figures left out).
func TestFiguresOf(t *testing.T) {
	r4 := foldRun(t, "4b")
	f := FiguresOf(r4)
	require.Equal(t, "Qwen3.5-4B-Q4_K_M.gguf", f.Model)
	require.Equal(t, "b9866 (40f58efe1)", f.Build)
	require.Equal(t, "40f58efe1", f.Commit, "no collector provenance: the build line's commit")
	require.InDelta(t, 3925.0, float64(*f.PeakGTTMiB), 0.001)
	require.InDelta(t, 795.8, float64(*f.PackedMiB), 0.001)
	require.InDelta(t, 33.49, float64(*f.DuplicatePct), 0.01)
	for _, row := range Rows {
		if row.Kept() {
			require.NotNil(t, row.OfFigures(f), row.Key)
			require.Equal(t, row.Of(r4), row.OfFigures(f), row.Key)
		}
	}
	f.PackedMiB, f.DuplicatePct = nil, nil
	b, err := json.Marshal(f)
	require.NoError(t, err)
	require.NotContains(t, string(b), "packed")
	require.Contains(t, string(b), `"peak_gtt_mib":3925,`)
	var back Figures
	require.NoError(t, json.Unmarshal(b, &back))
	require.Nil(t, back.PackedMiB)
	r := Report{Provenance: Provenance{LlamaBuild: "b1 (abc)", SourceCommit: "0123456789abcdef"}}
	require.Equal(t, "0123456789abcdef", FiguresOf(r).Commit, "the measured tree's commit first")
}

// FuzzBuildNumber: a number is found only in a text that starts with it
// ("b" and its digits, then the end or a space), and it prints back as
// those digits.
func FuzzBuildNumber(f *testing.F) {
	for _, s := range []string{"b9866 (40f58efe1)", "b10524 (9ee9fc04c, 0.1.2-dev)", "", "b", "b0", "b99999999999999999999 (x)", "b12x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := BuildNumber(s)
		_ = BuildCommit(s)
		if !ok {
			return
		}
		digits := strconv.FormatInt(n, 10)
		rest := strings.TrimLeft(s[1:], "0")
		if n == 0 {
			rest = "0" + rest
		}
		if !strings.HasPrefix(rest, digits) || (len(rest) > len(digits) && rest[len(digits)] != ' ') {
			t.Fatalf("BuildNumber(%q) = %d", s, n)
		}
	})
}
