package split

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// wrappers are the prefixes a supervisor writes in front of every line of
// a process's output: a log read through journalctl or docker compose
// folds as the bare log does.
var wrappers = map[string]string{
	"journald": "Mar 12 07:01:05 strix1 llama-server[433748]: ",
	"compose":  "llama-server-1  | ",
	"runtime":  "2026-03-12T07:01:05.123456789Z ",
	"kubectl":  "[pod/llama-server-0/server] ",
}

// wrapLog puts prefix in front of every line of b.
func wrapLog(b []byte, prefix string) []byte {
	var out bytes.Buffer
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		out.WriteString(prefix)
		out.Write(l)
	}
	return out.Bytes()
}

// wrapperFigures is what a wrapper must not change: every row, each model's, the
// flags and the checks' outcomes.
func wrapperFigures(r Report) string {
	s := fmt.Sprintf("model %v host %v state %v compute %v packed %v/%v build %q\nflags %v\n",
		mibStr(r.ModelGTTMiB), mibStr(r.ModelHostMiB), mibStr(r.StateMiB), mibStr(r.ComputeMiB),
		mibStr(r.PackedMiB), r.PackedWeights != nil, r.Provenance.LlamaBuild, r.Flags)
	for _, m := range r.Models {
		s += fmt.Sprintf("load %s live=%v %v\n", m.Role, m.Live, mibStr(m.ModelGTTMiB))
	}
	for _, c := range r.Checks {
		s += fmt.Sprintf("check %s %s\n", c.Name, c.Status)
	}
	return s
}

func mibStr(m *MiB) string {
	if m == nil {
		return "null"
	}
	return fmt.Sprintf("%.2f", float64(*m))
}

// TestRealLogsBehindWrappers folds every real log and recorded run bare and
// behind each wrapper's prefix: the same figures, flags and checks.
func TestRealLogsBehindWrappers(t *testing.T) {
	t.Parallel()
	logs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "logs", "real", "*", "llama.log"))
	require.NoError(t, err)
	runs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "runs", "*", "split.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	for _, path := range append(logs, runs...) {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		fold := func(b []byte) string {
			f := NewFold(Options{})
			_, err := f.ReadLog(bytes.NewReader(b), "log")
			require.NoError(t, err)
			return wrapperFigures(f.Report())
		}
		bare := fold(b)
		for name, prefix := range wrappers {
			t.Run(filepath.Base(filepath.Dir(path))+"/"+name, func(t *testing.T) {
				require.Equal(t, bare, fold(wrapLog(b, prefix)))
			})
		}
	}
}
