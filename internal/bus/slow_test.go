package bus_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestPublishSlowBrokerIntegration publishes through a proxy that delays
// every answer of a real server by more than the ack timeout: a broker
// that is connected and healthy, only slow. With BackPressure (what
// replay sets) the late acks are waited for (the events sent again, with
// a longer timeout) and nothing goes to the spool; without it (run,
// attach) the events go to the spool and its drain, waiting longer each
// time, still delivers them. Either way each event is on the stream once.
func TestPublishSlowBrokerIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	for _, tc := range []struct {
		name         string
		backPressure time.Duration
	}{{"back-pressure", 30 * time.Second}, {"spool", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Start(t)
			js := jsFor(t, s)
			proxy := natstest.StartProxy(t, s.Addr().String())
			proxy.SetLatency(300 * time.Millisecond)
			cfg := pubConfig(t)
			cfg.NATS.AckTimeout = 100 * time.Millisecond
			cfg.BackPressure = tc.backPressure
			p, err := bus.NewPublisher(connect(t, proxy.URL()), cfg, testLogger(t))
			require.NoError(t, err)
			evs := runEvents(t, "run-slow-"+tc.name, 30)
			a := newAcks()
			publishAll(t, p, evs, a)
			require.NoError(t, p.Flush(testCtx(t)))
			requireDrainedOnce(t, p, js, evs, a)
			st := p.Stats()
			require.Zero(t, st.Dropped)
			if tc.backPressure > 0 {
				require.Zero(t, st.Spooled, "a slow broker is waited for, not spooled for")
				require.Equal(t, uint64(len(evs)), st.Published)
			} else {
				require.Positive(t, st.Spooled)
			}
		})
	}
}
