package web

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// foldDevices folds the two-card run of testdata/devices with a samples
// file, as the run id.
func foldDevices(t *testing.T, samples, id string) split.Report {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "devices", "2xrocm-pci")
	f := split.NewFold(split.Options{})
	lf, err := os.Open(filepath.Join(dir, "split.log"))
	require.NoError(t, err)
	defer lf.Close()
	_, err = f.ReadLog(lf, "log")
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, samples))
	require.NoError(t, err)
	ss, _, err := split.ParseSamples(b)
	require.NoError(t, err)
	for _, s := range ss {
		f.AddSample(s)
	}
	f.SetRun(split.RunInfo{ID: id, Host: "rig07", Lane: "gpu0"})
	return f.Report()
}

// A bar per card with devices, on one scale: each card's VRAM at its peak
// split among its device's rows and what is not attributed.
func TestDeviceChart(t *testing.T) {
	r := foldDevices(t, "gtt.txt", "two-cards")
	cs := NewDeviceChart(r)
	require.NotNil(t, cs.Narrow)
	c := cs.Wide
	require.NotNil(t, c)
	require.Len(t, c.Bars, 2)
	require.Equal(t, "ROCm0 · 0000:83:00.0 VRAM", c.Bars[0].Label)
	require.Equal(t, "ROCm1 · 0000:03:00.0 VRAM", c.Bars[1].Label)
	require.InDelta(t, 10842, c.Bars[0].TotalMiB, 1e-9)
	seg := map[string]Segment{}
	for _, s := range c.Bars[0].Segments {
		seg[s.Key] = s
	}
	require.InDelta(t, 9613.47, seg["model"].MiB, 1e-9)
	require.InDelta(t, 544, seg["state"].MiB, 1e-9)
	require.InDelta(t, 368.01, seg["compute"].MiB, 1e-9)
	require.InDelta(t, 316.52, seg["unattributed"].MiB, 1e-6)
	last := c.Bars[0].Segments[len(c.Bars[0].Segments)-1]
	require.LessOrEqual(t, last.X+last.W, c.Right+0.2)
	// The smaller card's bar is shorter on the common scale.
	l1 := c.Bars[1].Segments[len(c.Bars[1].Segments)-1]
	require.Less(t, l1.X+l1.W, last.X+last.W)
	require.Nil(t, NewDeviceChart(split.Report{}).Wide, "no device table, no chart")
}

func TestRunPageDevices(t *testing.T) {
	src := &memSource{}
	src.add(foldDevices(t, "gtt.txt", "two-cards"))
	src.add(foldDevices(t, "gtt-over.txt", "two-cards-over"))
	srv, _ := serve(t, src, Options{Loopback: true})
	page := get(t, srv.URL+"/run/two-cards", 200)
	require.Contains(t, page, `<svg class="bars device-bars"`)
	require.Contains(t, page, `data-device-bar="ROCm0 · 0000:83:00.0 VRAM"`)
	require.Contains(t, page, `<tr data-device="ROCm0">`)
	require.Contains(t, page, `<tr data-card="0000:03:00.0">`)
	require.Equal(t, 4, strings.Count(page, `data-device-bar=`), "a bar per card with devices, in each layout")

	cmp := get(t, srv.URL+"/compare?a=two-cards&b=two-cards-over", 200)
	require.Contains(t, cmp, `<table id="compare-devices">`)
	require.Contains(t, cmp, `data-device="ROCm0" data-key="card_peak_mib"`)

	// A run on one APU device has no device section.
	on := replay(t, "testdata/runs/4b/events.jsonl")
	src.add(on)
	require.NotContains(t, get(t, srv.URL+"/run/"+on.Run.ID, 200), `device-bars`)
}
