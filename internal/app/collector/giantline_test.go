package collector

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestRunGiantLineIntegration is the fault as found: a child that writes a
// 50 MB line (among ordinary ones) and exits 0, published to a broker with
// the NATS default max_payload (1 MiB). Every event fits the broker's
// limit, none is refused or set aside, and the collector exits 0 as the
// child did; the line reaches the stream as consecutive pieces, which
// joined give its bytes (as far as the capture buffer kept them: what it
// did not is counted in the finish). Before, the line's pieces were
// batched into events of 9 to 16 MB, refused, and the collector exited 1.
func TestRunGiantLineIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	srv := startBroker(t)
	require.Equal(t, int64(1<<20), natstest.Connect(t, srv.ClientURL()).MaxPayload(), "the NATS default")
	dir := t.TempDir()
	giant := bytes.Repeat([]byte(`x"\`), 50<<20/3) // quotes and backslashes double in JSON
	var b bytes.Buffer
	b.WriteString("before the giant line\n")
	b.Write(giant)
	b.WriteString("\nafter the giant line\n")
	src := filepath.Join(dir, "giant.log")
	require.NoError(t, os.WriteFile(src, b.Bytes(), 0o644))

	cfg := testConfig(t)
	cfg.NATS.URL = srv.ClientURL()
	cfg.RunID = "giant-line"
	var logs syncBuffer
	o := newTestIO()
	// A bound against a hang, not a figure: 50 MB in pieces through the
	// spool under -race took past testCtx's 3 minutes on a loaded
	// machine with nothing refused.
	ctx, cancel := context.WithTimeout(context.Background(), 10*waitFor)
	defer cancel()
	code, err := Run(ctx, cfg, childArgv(t, "err="+src, "exit=0"), o.io(), zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, 0, code, "the child's code: %s", tail(logs.String()))
	require.NotContains(t, logs.String(), "rejected by the broker")
	rejected, _ := filepath.Glob(filepath.Join(cfg.Spool.Dir, "*", "rejected", "*"))
	require.Empty(t, rejected)

	msgs := streamOf(t, jsConn(t, srv.ClientURL()), cfg.RunID)
	count, text, _ := lineSeqs(decodedOf(msgs))
	require.Equal(t, "before the giant line", text[1])
	piece := len(text[2])
	require.Positive(t, piece)
	pieces := (len(giant) + piece - 1) / piece
	after := uint64(2 + pieces)
	require.Equal(t, "after the giant line", text[after], "the line after the pieces")
	kept := 0
	for seq := uint64(2); seq < after; seq++ {
		if count[seq] == 0 {
			continue // dropped by the capture buffer: counted below
		}
		require.Equal(t, 1, count[seq])
		at := int(seq-2) * piece
		require.Equal(t, string(giant[at:min(len(giant), at+piece)]), text[seq], "piece %d", seq)
		kept++
	}
	fin := msgs[len(msgs)-1].Finished
	require.NotNil(t, fin)
	require.Equal(t, uint64(pieces-kept), fin.Detail.DroppedEvents, "the pieces the capture buffer could not keep are counted")
}

// tail returns the last 4 kB of s.
func tail(s string) string { return s[max(0, len(s)-4096):] }
