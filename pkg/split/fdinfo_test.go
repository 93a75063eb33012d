package split

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := map[string]int64{"0": 0, "20 MiB": 20 << 20, "155068 KiB": 155068 << 10, "4096": 4096, "1 GiB": 1 << 30, "12 kB": 12 << 10}
	for in, want := range cases {
		got, ok := ParseSize([]byte(in))
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "MiB", "-1", "12 TiB", "1.5 MiB", "99999999999999999999"} {
		_, ok := ParseSize([]byte(bad))
		require.False(t, ok, bad)
	}
}

func TestParseFDInfoVariants(t *testing.T) {
	t.Parallel()
	// kernels 6.5 to about 6.7: the core header, then amdgpu's own copy with
	// the fence-context client id; the first id wins.
	dup := "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1181\ndrm-driver:\tamdgpu\ndrm-client-id:\t30\ndrm-pdev:\t0000:04:00.0\npasid:\t32785\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:04:00.0\ndrm-client-id:\t18446744073709551\ndrm-memory-vram:\t155068 KiB\ndrm-memory-gtt: \t20480 KiB\n"
	c, v := ParseFDInfo([]byte(dup))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, "30", c.ClientID)
	require.Equal(t, int64(20480<<10), c.GTTBytes)
	require.Equal(t, "drm-memory-gtt", c.Key)

	// Kernels 5.14 to 5.18: no drm- keys; the pasid keys the client.
	old := "pos:\t0\nflags:\t02100002\npdev:\t0000:04:00.0\npasid:\t32785\nvram mem:\t155068 kB\ngtt mem:\t20480 kB\ncpu mem:\t0 kB\ngfx0:\t0.00%\n"
	c, v = ParseFDInfo([]byte(old))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, "pasid-32785", c.ClientID)
	require.Equal(t, "0000:04:00.0", c.PDev)
	require.Equal(t, int64(20480<<10), c.GTTBytes)
	require.Equal(t, "gtt mem", c.Key)

	// drm-total-gtt wins over drm-memory-gtt; drm-total-cycles is not memory.
	both := "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:04:00.0\ndrm-total-cycles-gfx:\t99\ndrm-total-gtt:\t22 MiB\ndrm-memory-gtt: \t20480 KiB\n"
	c, v = ParseFDInfo([]byte(both))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, int64(22<<20), c.GTTBytes)

	for name, in := range map[string]string{
		"dma-buf":       "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t99\nsize:\t4194304\ncount:\t1\nexp_name:\tamdgpu\n",
		"kfd":           "pos:\t0\nflags:\t02\nmnt_id:\t1\nino:\t2\n",
		"xe":            "drm-driver:\txe\ndrm-client-id:\t3\ndrm-total-gtt:\t192 KiB\n",
		"amdxdna":       "drm-driver:\tamdxdna_accel_driver\ndrm-client-id:\t76\ndrm-pdev:\t0000:c5:00.1\ndrm-total-memory:\t0\n",
		"old, no pasid": "pdev:\t0000:04:00.0\nvram mem:\t1024 kB\ngtt mem:\t2048 kB\n",
		"no id":         "drm-driver:\tamdgpu\ndrm-pdev:\t0000:04:00.0\ndrm-total-gtt:\t2 MiB\n",
		"cut":           "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:04:00.0\ndrm-total-gtt:\t2",
	} {
		want := map[string]FDVerdict{"dma-buf": FDNotDRM, "kfd": FDNotDRM, "xe": FDOtherDriver, "amdxdna": FDOtherDriver,
			"old, no pasid": FDUnsupported, "no id": FDMalformed, "cut": FDMalformed}[name]
		_, v := ParseFDInfo([]byte(in))
		require.Equal(t, want, v, name)
	}
}
