package collector

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// A restarted attach of the same run appends to --out and its local split
// covers both attaches; another run starts the files afresh.
func TestRecorderResumesOnlyTheSameRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(run string, resume string, seq uint64, text string) *split.Fold {
		t.Helper()
		fold := split.NewFold(split.Options{})
		rec, err := newRecorder(dir, resume, fold)
		require.NoError(t, err)
		p := &pipeline{origin: events.Origin{RunID: run, Host: "h", Lane: "l"}, maxLines: 256, out: rec, fold: fold}
		require.NoError(t, p.emit(t.Context(), sources.Record{Lines: []split.Line{{Stream: "log", Seq: seq, Text: text}}}))
		require.NoError(t, rec.close())
		return fold
	}
	line := "load_tensors:         HRX0 model buffer size =  %s MiB"
	write("a", "a", 1, "llama_model_loader: loaded meta data with 3 key-value pairs and 4 tensors from m.gguf")
	fold := write("a", "a", 2, fmtLine(line, "100.00"))
	r := fold.Report()
	require.NotNil(t, r.ModelGTTMiB, "the second attach folded the first one's load marker and its own line")
	require.InDelta(t, 100.0, float64(*r.ModelGTTMiB), 1e-9)
	log, err := os.ReadFile(filepath.Join(dir, "split.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "loaded meta data")
	require.Contains(t, string(log), "100.00")

	write("b", "b", 1, "other run")
	log, err = os.ReadFile(filepath.Join(dir, "split.log"))
	require.NoError(t, err)
	require.Equal(t, "other run\n", string(log), "another run's --out starts afresh")
}

func fmtLine(f, v string) string { return fmt.Sprintf(f, v) }
