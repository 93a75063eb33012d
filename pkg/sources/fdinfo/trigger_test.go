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
// spike starts (SampleNow), as the collector does when it reads the log
// line of the allocation, before it reads on.
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
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)
	// The spikes start once Run samples: a SampleNow before Run has its
	// sampler takes nothing, and on a loaded machine Run's goroutine may
	// start after the first spikes ended.
	started := make(chan struct{})
	rec := &recorder{onSample: func(n int) {
		if n == 1 {
			close(started)
		}
	}}
	done := make(chan error, 1)
	go func() { done <- src.Run(t.Context(), rec.emit) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run returned before its first sample: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no first sample in a minute")
	}

	rng := rand.New(rand.NewPCG(seed, 12))
	for k := 1; k <= n; k++ {
		// A random pause, so spikes start at every phase of the interval.
		time.Sleep(spikeLen + time.Duration(rng.Int64N(int64(2*interval/3))))
		set(1000000 + k)
		if trigger {
			src.SampleNow()
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
	var missed []int
	for k := 1; k <= n; k++ {
		if seen[fmt.Sprintf("%07d", 1000000+k)] {
			hits++
		} else {
			missed = append(missed, k)
		}
	}
	if trigger && len(missed) > 0 {
		t.Logf("spikes missed with samples at the log line: %v (of %d)", missed, n)
	}
	return float64(hits) / float64(n), src.Stats()
}

// TestTriggeredSamplesCatchTransientPeaks: a peak far shorter than the
// interval (15 ms against 60 ms) is caught by a sample taken when its log
// line is read, where the plain interval catches about a quarter of them.
// It runs in real time, so it is skipped with -short. (When the sampler's
// own goroutine took the sample, woken by a channel, 1-2 peaks of 150 went
// unseen at load 30 on 2 cores: that goroutine got no CPU while the peak
// lasted.)
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

// SampleNow samples before it returns: a value the fdinfo holds only
// while SampleNow runs is in the sample. One asked sooner than
// TriggerMinGap after the last asked for is taken at the gap, not dropped
// and not at once; the ticks do not count against the gap.
func TestSampleNowSamplesBeforeReturning(t *testing.T) {
	t.Parallel()
	tr := newTree(t, false, true)
	tr.addProc(100, 1, "llama-server", 5000)
	tr.addFD(100, 3, "/dev/dri/renderD128", spikeText(100))
	f, err := os.OpenFile(filepath.Join(tr.pidDir(100), "fdinfo", "3"), os.O_WRONLY, 0)
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
	cfg.Interval = time.Hour // only the first sample and the asked ones
	cfg.TriggerMinGap = 30 * time.Millisecond
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)
	got := make(chan int, 16)
	rec := &recorder{onSample: func(n int) { got <- n }}
	done := make(chan error, 1)
	go func() { done <- src.Run(t.Context(), rec.emit) }()
	require.Equal(t, 1, <-got) // the first sample (a tick), at once

	set(1000001)
	src.SampleNow() // not held back by the tick before it
	set(100)
	require.Equal(t, 2, <-got)
	src.SampleNow() // sooner than the gap: taken at the gap
	require.Equal(t, 3, <-got)
	src.SampleNow()
	require.Equal(t, 4, <-got)
	tr.removeProc(100)
	src.SampleNow()
	require.NoError(t, <-done)
	src.SampleNow() // after Run: nothing

	st := src.Stats()
	require.Equal(t, uint64(3), st.Triggered)
	require.Equal(t, uint64(4), st.Samples)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	fds := fdsOf(t, rec.samples[1], 100)
	require.Len(t, fds, 1)
	require.Contains(t, fds[3].Text, "drm-total-gtt:\t1000001 MiB", "the value held only while SampleNow ran")
	for i := 2; i < len(rec.samples); i++ {
		require.GreaterOrEqual(t, rec.samples[i].Time.Sub(rec.samples[i-1].Time), cfg.TriggerMinGap, "sample %d", i+1)
	}
}
