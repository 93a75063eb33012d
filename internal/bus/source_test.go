package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// On a 3-node cluster, the node leading the events stream (and not the
// partitioned one) is shut down. Often the partitioned stream's source
// goes silent with it (its consumer lived there), and the server would
// re-create it only after 10–20 s: ReattachStalledSource must see the
// silence and step the partitioned stream's leader down. Either way an
// event published after the loss reaches its partition exactly once (the
// next leader resumes after the last sourced message), and a source that
// answers is left alone.
func TestReattachStalledSourceIntegration(t *testing.T) {
	skipShort(t)
	c := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// Longer than testCtx: a node's loss and the elections it starts
	// may take a while on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg := bus.DefaultStreamConfig()
	cfg.Replicas = 3
	// (A cluster under load may call a peer offline for a moment: "no
	// suitable peers for placement".)
	require.Eventually(t, func() bool {
		_, err := bus.EnsureStream(ctx, js, cfg, zerolog.Nop())
		if err == nil {
			_, err = bus.EnsurePartitions(ctx, js, bus.PartitionConfig{Stream: bus.DefaultStream, Partitions: 4, Replicas: 3}, zerolog.Nop())
		}
		return err == nil
	}, time.Minute, 100*time.Millisecond)

	publish := func(run string) {
		t.Helper()
		require.Eventually(t, func() bool {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := js.Publish(pctx, "gttsplit.run.h.l."+run, []byte("{}"), jetstream.WithMsgID(run))
			return err == nil
		}, 30*time.Second, 50*time.Millisecond)
	}
	inParts := func() uint64 {
		ps, err := js.Stream(ctx, bus.PartitionStream(bus.DefaultStream))
		if err != nil {
			return 0
		}
		return ps.CachedInfo().State.Msgs
	}
	leader := func(stream string) string {
		s, err := js.Stream(ctx, stream)
		if err != nil || s.CachedInfo().Cluster == nil {
			return ""
		}
		return s.CachedInfo().Cluster.Leader
	}
	publish("r1")
	require.Eventually(t, func() bool { return inParts() == 1 }, 30*time.Second, 50*time.Millisecond)

	// The events stream's leader must not also lead the partitioned one
	// (a new partitioned leader sets its source up anyway).
	var gone *server.Server
	require.Eventually(t, func() bool {
		el, pl := leader(bus.DefaultStream), leader(bus.PartitionStream(bus.DefaultStream))
		if el == "" || pl == "" {
			return false
		}
		if el == pl {
			_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+bus.PartitionStream(bus.DefaultStream), nil, time.Second)
			return false
		}
		for _, s := range c.Servers {
			if s.Name() == el {
				gone = s
			}
		}
		return gone != nil
	}, 30*time.Second, 200*time.Millisecond)
	natstest.Shutdown(gone)
	publish("r2")

	// Until the event is in its partition: the server may have kept the
	// source going (its consumer was not on the node that went), or the
	// source went silent and must be re-attached, well before the
	// server's own 10–20 s.
	silent, did := false, ""
	require.Eventually(t, func() bool {
		if ps, err := js.Stream(ctx, bus.PartitionStream(bus.DefaultStream)); err == nil {
			for _, so := range ps.CachedInfo().Sources {
				silent = silent || so.Active > bus.SourceStall+time.Second
			}
		}
		d, err := bus.ReattachStalledSource(ctx, js, bus.DefaultStream, bus.SourceStall)
		if err != nil {
			t.Log(err)
		}
		if d != "" {
			did = d
			t.Log(d)
		}
		return inParts() == 2
	}, 60*time.Second, 250*time.Millisecond)
	switch {
	case did != "":
		t.Log("the source went silent and was re-attached")
	case silent:
		t.Fatal("the source stayed silent for longer than SourceStall and was not re-attached")
	default:
		t.Log("the source was not silenced by the node's loss this time")
	}
	time.Sleep(500 * time.Millisecond)
	require.EqualValues(t, 2, inParts(), "each event once")
	d, err := bus.ReattachStalledSource(ctx, js, bus.DefaultStream, bus.SourceStall)
	require.NoError(t, err)
	require.Empty(t, d, "a source that answers is left alone")
}
