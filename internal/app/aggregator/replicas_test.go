package aggregator

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
)

// An operator's R3 state bucket stays R3 for an aggregator asking R1 (with
// a warning naming nats.replicas); a missing one is created with the
// configured replicas.
func TestStateBucketNeverLowered(t *testing.T) {
	skipShort(t)
	c := natstest.StartCluster(t, 3)
	_, js := connectJS(t, c.URLs())
	ctx := testCtx(t)
	kv, err := EnsureBucket(ctx, js, 3, zerolog.Nop())
	require.NoError(t, err)
	require.NotNil(t, kv)
	var logs sinktest.Buffer
	_, err = EnsureBucket(ctx, js, 1, zerolog.New(&logs))
	require.NoError(t, err)
	st, err := js.Stream(ctx, "KV_"+StateBucket)
	require.NoError(t, err)
	require.Equal(t, 3, st.CachedInfo().Config.Replicas)
	require.Contains(t, logs.String(), `"setting":"nats.replicas"`)

	require.NoError(t, js.DeleteKeyValue(ctx, StateBucket))
	_, err = EnsureBucket(ctx, js, 1, zerolog.Nop())
	require.NoError(t, err)
	_, err = EnsureBucket(ctx, js, 3, zerolog.Nop())
	require.NoError(t, err, "raised")
	var info *jetstream.StreamInfo
	st, err = js.Stream(ctx, "KV_"+StateBucket)
	require.NoError(t, err)
	info = st.CachedInfo()
	require.Equal(t, 3, info.Config.Replicas)
}
