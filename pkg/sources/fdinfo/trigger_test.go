package fdinfo

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/stretchr/testify/require"
)

// spikeText is an amdgpu fdinfo text whose drm-total-gtt is v MiB, always
// the same length, so that rewriting it in place never shows a reader a
// short or empty file.
func spikeText(v int) string {
	return fmt.Sprintf("pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1181\ndrm-driver:\tamdgpu\ndrm-client-id:\t30\ndrm-pdev:\t0000:c5:00.0\npasid:\t32785\ndrm-total-gtt:\t%07d MiB\n", v)
}

// spikeRun samples a fake process tree whose fdinfo rises to a spike's own
// value for spikeLen at random moments, n times, and returns the share of
// spikes some sample saw. With trigger, the test asks for a sample as each
// spike starts, as the collector does when the log line of the allocation
// arrives.
func spikeRun(t *testing.T, trigger bool, interval, spikeLen time.Duration, n int, seed uint64) (caught float64, st Stats) {
	t.Helper()
	tr := newTree(t, false, true)
	tr.addProc(100, 1, "llama-server", 5000)
	tr.addFD(100, 3, "/dev/dri/renderD128", spikeText(100))
	path := filepath.Join(tr.pidDir(100), "fdinfo", "3")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	set := func(v int) {
		_, err := f.WriteAt([]byte(spikeText(v)), 0)
		require.NoError(t, err)
	}

	cfg := DefaultConfig()
	var proc Process
	proc.PID = 100
	cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
	cfg.Interval = interval
	cfg.RescanInterval = time.Hour
	var ch chan struct{}
	if trigger {
		ch = make(chan struct{}, 1)
		proc.Trigger = ch
	}
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)
	rec := &recorder{}
	done := make(chan error, 1)
	go func() { done <- src.Run(t.Context(), rec.emit) }()

	rng := rand.New(rand.NewPCG(seed, 12))
	for k := 1; k <= n; k++ {
		// A random pause, so spikes start at every phase of the interval.
		time.Sleep(spikeLen + time.Duration(rng.Int64N(int64(2*interval/3))))
		set(1000000 + k)
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		time.Sleep(spikeLen)
		set(100)
	}
	time.Sleep(2 * interval)
	tr.removeProc(100)
	require.NoError(t, <-done)

	seen := map[string]bool{}
	rec.mu.Lock()
	for _, smp := range rec.samples {
		for _, fd := range fdsOf(t, smp, 100) {
			if i := strings.Index(fd.Text, "drm-total-gtt:\t1"); i >= 0 {
				seen[fd.Text[i+len("drm-total-gtt:\t"):i+len("drm-total-gtt:\t")+7]] = true
			}
		}
	}
	rec.mu.Unlock()
	hits := 0
	for k := 1; k <= n; k++ {
		if seen[fmt.Sprintf("%07d", 1000000+k)] {
			hits++
		}
	}
	return float64(hits) / float64(n), src.Stats()
}

// TestTriggeredSamplesCatchTransientPeaks: a peak far shorter than the
// interval (15 ms against 60 ms) is caught by a sample taken when its log
// line arrives, where the plain interval catches about a quarter of them.
// It runs in real time, so it is skipped with -short.
func TestTriggeredSamplesCatchTransientPeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time sampling of 2 x 150 spikes")
	}
	t.Parallel()
	const (
		interval = 60 * time.Millisecond
		spikeLen = 15 * time.Millisecond
		n        = 150
	)
	var plain, triggered float64
	var plainSt, trigSt Stats
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		plain, plainSt = spikeRun(t, false, interval, spikeLen, n, 1)
	})
	t.Run("triggered", func(t *testing.T) {
		t.Parallel()
		triggered, trigSt = spikeRun(t, true, interval, spikeLen, n, 1)
	})
	t.Cleanup(func() {
		t.Logf("spikes of %v every %v-interval: plain interval caught %.1f %% (%d samples, largest gap %v); with samples at the log line %.1f %% (%d samples, %d triggered, largest gap %v)",
			spikeLen, interval, 100*plain, plainSt.Samples, plainSt.LargestGap, 100*triggered, trigSt.Samples, trigSt.Triggered, trigSt.LargestGap)
		if t.Failed() {
			return
		}
		if triggered < 0.99 {
			t.Errorf("triggered sampling caught %.1f %% of the spikes, want at least 99 %%", 100*triggered)
		}
		if plain >= triggered {
			t.Errorf("the plain interval caught %.1f %%, not fewer than the triggered %.1f %%", 100*plain, 100*triggered)
		}
		if trigSt.Triggered == 0 || plainSt.Triggered != 0 {
			t.Errorf("triggered samples: %d with a trigger, %d without", trigSt.Triggered, plainSt.Triggered)
		}
	})
}

// A trigger that comes sooner than TriggerMinGap after a sample is served
// at the gap, not dropped and not at once.
func TestTriggerRespectsMinGap(t *testing.T) {
	t.Parallel()
	tr := newTree(t, false, true)
	tr.addProc(100, 1, "llama-server", 5000)
	tr.addFD(100, 3, "/dev/dri/renderD128", spikeText(100))
	cfg := DefaultConfig()
	var proc Process
	proc.PID = 100
	cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
	cfg.Interval = time.Hour // only the first sample and triggered ones
	cfg.TriggerMinGap = 30 * time.Millisecond
	ch := make(chan struct{}, 1)
	proc.Trigger = ch
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)
	got := make(chan int, 16)
	rec := &recorder{onSample: func(n int) { got <- n }}
	done := make(chan error, 1)
	go func() { done <- src.Run(t.Context(), rec.emit) }()
	require.Equal(t, 1, <-got) // the first sample, at once
	ch <- struct{}{}           // sooner than the gap: served at the gap
	require.Equal(t, 2, <-got)
	ch <- struct{}{}
	require.Equal(t, 3, <-got)
	tr.removeProc(100)
	ch <- struct{}{}
	require.NoError(t, <-done)
	st := src.Stats()
	require.Equal(t, uint64(2), st.Triggered)
	require.Equal(t, uint64(3), st.Samples)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := 1; i < len(rec.samples); i++ {
		require.GreaterOrEqual(t, rec.samples[i].Time.Sub(rec.samples[i-1].Time), cfg.TriggerMinGap, "sample %d", i+1)
	}
}
