package split

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The fdinfo regions by driver, each client once: amdgpu's vram, gtt and
// cpu (total, else the resident legacy key, else the pre-5.19 key), xe's
// vram0/vram1, gtt and system, i915's local0 and system0.
func TestParseFDInfoRegions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text        string
		verdict           FDVerdict
		vram, gtt, cpu    int64
		resident          uint8
		vramRegs, gttRegs string
	}{
		{"amdgpu 6.13", "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:03:00.0\ndrm-total-cpu:\t0\ndrm-total-gtt:\t104 MiB\ndrm-total-vram:\t11038208 KiB\ndrm-total-gds:\t4096\ndrm-total-cycles-gfx:\t9\ndrm-memory-vram:\t1 KiB\ndrm-memory-gtt: \t1 KiB\n",
			FDAmdgpu, 11038208 << 10, 104 << 20, 0, 0, "vram", "gtt"},
		{"amdgpu 6.4, resident only", "drm-driver:\tamdgpu\ndrm-pdev:\t0000:c4:00.0\ndrm-client-id:\t2219\ndrm-memory-vram:\t524288 KiB\ndrm-memory-gtt: \t8388608 KiB\ndrm-memory-cpu: \t0 KiB\n",
			FDAmdgpu, 512 << 20, 8 << 30, 0, 1<<MemVRAM | 1<<MemGTT | 1<<MemCPU, "vram", "gtt"},
		{"amdgpu 5.18", "pdev:\t0000:04:00.0\npasid:\t32785\nvram mem:\t155068 kB\ngtt mem:\t20480 kB\ncpu mem:\t0 kB\n",
			FDAmdgpu, 155068 << 10, 20480 << 10, 0, 1<<MemVRAM | 1<<MemGTT | 1<<MemCPU, "vram", "gtt"},
		{"xe, two tiles", "drm-driver:\txe\ndrm-client-id:\t3\ndrm-pdev:\t0000:03:00.0\ndrm-total-system:\t4 MiB\ndrm-total-gtt:\t192 KiB\ndrm-total-vram0:\t23992 KiB\ndrm-total-vram1:\t8 MiB\ndrm-total-stolen:\t0\ndrm-total-cycles-rcs:\t7655183225\n",
			FDOtherDriver, 23992<<10 + 8<<20, 192 << 10, 4 << 20, 0, "vram0+vram1", "gtt"},
		{"i915", "drm-driver:\ti915\ndrm-client-id:\t7\ndrm-pdev:\t0000:03:00.0\ndrm-total-system0:\t64 MiB\ndrm-total-local0:\t256 MiB\ndrm-total-stolen-local0:\t0\n",
			FDOtherDriver, 256 << 20, 64 << 20, 0, 0, "local0", "system0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, v := ParseFDInfo([]byte(tc.text))
			require.Equal(t, tc.verdict, v)
			require.Equal(t, [NumMemClasses]int64{tc.vram, tc.gtt, tc.cpu}, c.Mem.Bytes)
			require.Equal(t, tc.resident, c.Mem.Resident)
			require.Equal(t, tc.vramRegs, c.Mem.Regions[MemVRAM])
			require.Equal(t, tc.gttRegs, c.Mem.Regions[MemGTT])
		})
	}
	// A region value that does not parse is left out and counted; the
	// client's GTT still counts.
	c, v := ParseFDInfo([]byte("drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-total-gtt:\t2 MiB\ndrm-total-vram:\tlots\n"))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, 1, c.Mem.Skipped)
	require.Equal(t, int64(2<<20), c.GTTBytes)
}

// A region figure that does not parse is counted and said; the client's
// GTT, and so the headline, still count.
func TestRegionSkippedIsCounted(t *testing.T) {
	t.Parallel()
	bad := fdText("amdgpu", "0000:03:00.0", "5", "300 MiB") + "drm-total-vram:\t12 TiB\n"
	f := NewFold(Options{})
	f.AddSample(sample(1, bad))
	f.AddSample(sample(1, bad)) // the same tick again: counted once
	r := f.Report()
	require.InDelta(t, 300.0, val(r.PeakGTTMiB), 1e-9)
	require.Contains(t, r.Flags, FlagFDsSkipped)
	require.Contains(t, r.Detail.Warnings, "1 region figures of fdinfo files did not parse and were left out of the memory per card")
}
