package fdinfo

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
)

// The fds of the two-card process of testdata/devices at its VRAM peak
// (testdata/fdinfo/2xrocm-peak): per card a client on two fds (libdrm's
// dup) and a second client; a kfd, a dma-buf and terminal fds.
var twoCardLinks = map[int]string{
	0: "/dev/pts/3", 1: "/dev/pts/3", 2: "/dev/pts/3", 3: "/dev/kfd",
	4: "/dev/dri/renderD128", 5: "/dev/dri/renderD128", 6: "/dev/dri/renderD128",
	7: "/dev/dri/renderD129", 8: "/dev/dri/renderD129", 9: "/dev/dri/renderD129",
	10: "/dmabuf:",
}

func twoCardTree(t testing.TB, links bool) *tree {
	tr := newTree(t, true, links)
	tr.addProc(1, 0, "init", 1)
	tr.addProc(73114, 1, "llama-server", 5000)
	for fd, l := range twoCardLinks {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "fdinfo", "2xrocm-peak", strconv.Itoa(fd)))
		require.NoError(t, err)
		tr.addFD(73114, fd, l, string(b))
	}
	tr.addCard("card1", "amdgpu", 140<<20, 31<<30)
	tr.addCard("card2", "amdgpu", 220<<20, 31<<30)
	return tr
}

// sampleOnce takes one sample of the tree rooted at pid.
func sampleOnce(t *testing.T, tr *tree, pid int, at time.Time) *split.Sample {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
	s, err := newSampler(cfg, tr.readlink, testLogger(t), pid)
	require.NoError(t, err)
	defer s.close()
	smp := s.sample(at)
	require.NotNil(t, smp)
	return smp
}

// A process on two discrete cards: the sampler keeps the DRM fds of both
// (by their links, or by content without them), and the fold sums them
// per card and region, each client once: VRAM 9688 and 10842 MiB, GTT 24
// and 106 MiB, as testdata/README.md ("devices/", tick 9) works out.
func TestSamplerTwoCards(t *testing.T) {
	t.Parallel()
	for _, links := range []bool{true, false} {
		smp := sampleOnce(t, twoCardTree(t, links), 73114, time.Date(2026, 11, 12, 9, 14, 7, 611395448, time.UTC))
		require.Equal(t, []int{4, 5, 6, 7, 8, 9}, sortedKeys(fdsOf(t, smp, 73114)), "links %v", links)
		require.Len(t, smp.Cards, 2)

		// Through the samples file, as collector run --out writes it,
		// with the run's log: the device table's cards.
		var buf bytes.Buffer
		split.FormatSamples(&buf, *smp)
		ss, st, err := split.ParseSamples(buf.Bytes())
		require.NoError(t, err)
		require.Zero(t, st.SkippedLines)
		f := split.NewFold(split.Options{})
		lf, err := os.Open(filepath.Join("..", "..", "..", "testdata", "devices", "2xrocm-pci", "split.log"))
		require.NoError(t, err)
		_, err = f.ReadLog(lf, "log")
		lf.Close()
		require.NoError(t, err)
		f.AddSample(ss[0])
		r := f.Report()
		require.Len(t, r.Cards, 2)
		want := map[string][2]float64{"0000:03:00.0": {9688, 24}, "0000:83:00.0": {10842, 106}}
		for _, k := range r.Cards {
			w := want[k.PDev]
			require.Equal(t, "vram", k.Memory, k.PDev)
			require.Equal(t, 2, k.Clients, k.PDev)
			require.Equal(t, "vram", k.Regions[0].Class)
			require.InDelta(t, w[0], float64(k.Regions[0].PeakMiB), 1e-9, k.PDev)
			require.Equal(t, "gtt", k.Regions[1].Class)
			require.InDelta(t, w[1], float64(k.Regions[1].PeakMiB), 1e-9, k.PDev)
		}
		require.InDelta(t, 130.0, float64(*r.PeakGTTMiB), 1e-9, "the headline: GTT of both cards")
	}
}

// TestTwoCardSampleSize states the size of one sample of the two-card
// process: its gtt.txt block, its fdinfo-sample event, and one card's
// share (docs/formats.md, "The samples file").
func TestTwoCardSampleSize(t *testing.T) {
	t.Parallel()
	smp := sampleOnce(t, twoCardTree(t, true), 73114, time.Date(2026, 11, 12, 9, 14, 7, 611395448, time.UTC))
	var txt bytes.Buffer
	split.FormatSamples(&txt, *smp)
	ev, err := events.NewFDInfoSample(events.Origin{RunID: "rig07-20261112T091403-32b", Host: "rig07", Lane: "gpu0"}, *smp)
	require.NoError(t, err)
	js, err := events.Marshal(ev)
	require.NoError(t, err)
	card := 0
	for _, p := range smp.Procs {
		for _, fd := range p.FDs {
			if fd.Link == "/dev/dri/renderD128" {
				card += len(fd.Text)
			}
		}
	}
	t.Logf("one sample of a process on two cards (6 DRM fds, 4 clients): %d bytes of gtt.txt, %d bytes as an event; one card's fd texts %d bytes", txt.Len(), len(js), card)
	// What docs/formats.md states.
	require.Equal(t, 3670, txt.Len())
	require.Equal(t, 4605, len(js))
	require.Equal(t, 1703, card)
}

// The discrete-card fixtures read as the kernel's documented layouts say:
// amdgpu's vram and gtt, xe's vram0 and gtt, i915's local0 and system0.
func TestDiscreteCardFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		verdict   split.FDVerdict
		pdev      string
		vram, gtt int64
	}{
		{"amdgpu-6.13-dgpu", split.FDAmdgpu, "0000:03:00.0", 9688 << 20, 22 << 20},
		{"amdgpu-6.13-dgpu2", split.FDAmdgpu, "0000:83:00.0", 10842 << 20, 104 << 20},
		{"amdgpu-6.13-dgpu2-second-client", split.FDAmdgpu, "0000:83:00.0", 0, 2 << 20},
		{"xe-dgpu", split.FDOtherDriver, "0000:03:00.0", 8704 << 20, 192 << 10},
		{"i915-dg2", split.FDOtherDriver, "0000:03:00.0", 6144 << 20, 64 << 20},
	} {
		c, v := split.ParseFDInfo([]byte(fixture(t, tc.name)))
		require.Equal(t, tc.verdict, v, tc.name)
		require.Equal(t, tc.pdev, c.PDev, tc.name)
		require.Equal(t, tc.vram, c.Mem.Bytes[split.MemVRAM], tc.name)
		require.Equal(t, tc.gtt, c.Mem.Bytes[split.MemGTT], tc.name)
	}
}
