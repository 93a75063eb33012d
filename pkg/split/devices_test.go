package split

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// foldFiles folds a log and, when given, a samples file.
func foldFiles(t testing.TB, logPath, samplesPath string) *Fold {
	t.Helper()
	f := NewFold(Options{})
	lf, err := os.Open(logPath)
	require.NoError(t, err)
	defer lf.Close()
	_, err = f.ReadLog(lf, "log")
	require.NoError(t, err)
	if samplesPath != "" {
		b, err := os.ReadFile(samplesPath)
		require.NoError(t, err)
		ss, st, err := ParseSamples(b)
		require.NoError(t, err)
		f.NoteSkippedSampleLines(st.SkippedLines)
		for _, s := range ss {
			f.AddSample(s)
		}
	}
	return f
}

func devicesDir(name string) string {
	return filepath.Join("..", "..", "testdata", "devices", name)
}

// twoCards folds testdata/devices/2xrocm-pci's log with one of its samples
// files.
func twoCards(t testing.TB, samples string) Report {
	t.Helper()
	dir := devicesDir("2xrocm-pci")
	return foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, samples)).Report()
}

func device(t *testing.T, r Report, name string) Device {
	t.Helper()
	for _, d := range r.Devices {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no device %s in %+v", name, r.Devices)
	return Device{}
}

func card(t *testing.T, r Report, pdev string) Card {
	t.Helper()
	for _, k := range r.Cards {
		if k.PDev == pdev {
			return k
		}
	}
	t.Fatalf("no card %s", pdev)
	return Card{}
}

func region(k Card, class string) CardRegion {
	for _, g := range k.Regions {
		if g.Class == class {
			return g
		}
	}
	return CardRegion{}
}

func checksNamed(r Report, name string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// The two-card run of testdata/devices/2xrocm-pci (testdata/README.md,
// "devices/"): each device matched to its card by the PCI address the log
// prints, not attributed per card against its VRAM.
func TestDeviceTableTwoDiscreteCards(t *testing.T) {
	t.Parallel()
	r := twoCards(t, "gtt.txt")

	// The headline is unchanged: GTT over both cards, the rows as ever.
	requireMiB(t, ptr(130.0), r.PeakGTTMiB, "peak")
	requireMiB(t, ptr(18153.72), r.ModelGTTMiB, "model")
	requireMiB(t, ptr(417.66), r.ModelHostMiB, "host")
	requireMiB(t, ptr(1024.0), r.StateMiB, "state")
	requireMiB(t, ptr(821.13), r.ComputeMiB, "compute")

	var names []string
	for _, d := range r.Devices {
		names = append(names, d.Kind+":"+d.Name)
	}
	require.Equal(t, []string{"device:ROCm0", "device:ROCm1", "pinned:ROCm_Host", "host:Host"}, names)
	r0, r1 := device(t, r, "ROCm0"), device(t, r, "ROCm1")
	requireMiB(t, ptr(9613.47), r0.ModelMiB, "ROCm0 model")
	requireMiB(t, ptr(544.0), r0.StateMiB, "ROCm0 state")
	requireMiB(t, ptr(368.01), r0.ComputeMiB, "ROCm0 compute")
	require.Equal(t, "0000:83:00.0", r0.PCI)
	require.Equal(t, "0000:83:00.0", r0.Card)
	require.Equal(t, "pci", r0.Match)
	requireMiB(t, ptr(24522), r0.FreeMiB, "ROCm0 free")
	requireMiB(t, ptr(316.52), r0.NotAttributedMiB, "ROCm0 not attributed")
	require.Equal(t, "0000:03:00.0", r1.Card)
	requireMiB(t, ptr(255.23), r1.NotAttributedMiB, "ROCm1 not attributed")
	requireMiB(t, ptr(40.60), device(t, r, "ROCm_Host").ComputeMiB, "pinned compute")
	requireMiB(t, ptr(417.66), device(t, r, "Host").ModelMiB, "host model")

	hi, lo := card(t, r, "0000:83:00.0"), card(t, r, "0000:03:00.0")
	require.Equal(t, "vram", hi.Memory)
	require.Equal(t, []string{"ROCm0"}, hi.Devices)
	require.Equal(t, 2, hi.Clients, "client A on two fds counts once, client B too")
	require.InDelta(t, 10842.0, float64(region(hi, "vram").PeakMiB), 1e-9)
	require.InDelta(t, 10779.5, float64(region(hi, "vram").FinalMiB), 1e-9, "a KiB line")
	require.Equal(t, "2026-11-12T09:14:07.611395448Z", region(hi, "vram").PeakAt, "tick 9, the first at the peak")
	require.InDelta(t, 106.0, float64(region(hi, "gtt").PeakMiB), 1e-9)
	require.InDelta(t, 9688.0, float64(region(lo, "vram").PeakMiB), 1e-9)
	require.InDelta(t, 24.0, float64(region(lo, "gtt").PeakMiB), 1e-9)
	requireMiB(t, ptr(10525.48), hi.AttributedMiB, "card attributed")

	for _, c := range checksNamed(r, "device_vs_card") {
		require.Equal(t, StatusOK, c.Status, c.Detail)
	}
	require.Len(t, checksNamed(r, "device_vs_card"), 2)
	require.NotContains(t, r.Flags, FlagDeviceOrder)
	require.NotContains(t, r.Flags, FlagDeviceOverCard)
	// The headline's GTT does not hold a discrete card's buffers: not
	// judged there, nor flagged negative.
	require.NotContains(t, r.Flags, FlagUnattribNegative)
	at := checksNamed(r, "attributed_vs_peak")
	require.Len(t, at, 1)
	require.Equal(t, StatusWarn, at[0].Status)
	require.Contains(t, at[0].Detail, "discrete cards")
	require.Contains(t, r.Expected, "ROCm0 (0000:83:00.0) 2.9 % of its VRAM peak not attributed")
}

// Matching by order gives another answer than the PCI address the log
// prints: with HIP_VISIBLE_DEVICES=1,0, ROCm0 is the card at the higher
// address.
func TestDeviceMatchByPCINotOrder(t *testing.T) {
	t.Parallel()
	dir := devicesDir("2xrocm-pci")
	log, err := os.ReadFile(filepath.Join(dir, "split.log"))
	require.NoError(t, err)
	// The same log as an older build prints it: no PCI address.
	noPCI := strings.NewReplacer(" (0000:83:00.0)", "", " (0000:03:00.0)", "").Replace(string(log))
	require.NotEqual(t, string(log), noPCI)
	samples, err := os.ReadFile(filepath.Join(dir, "gtt.txt"))
	require.NoError(t, err)
	ss, _, err := ParseSamples(samples)
	require.NoError(t, err)
	fold := func(text string) Report {
		f := NewFold(Options{})
		_, err := f.ReadLog(strings.NewReader(text), "log")
		require.NoError(t, err)
		for _, s := range ss {
			f.AddSample(s)
		}
		return f.Report()
	}
	rule, naive := fold(string(log)), fold(noPCI)
	requireMiB(t, ptr(316.52), device(t, rule, "ROCm0").NotAttributedMiB, "by PCI")
	require.Equal(t, "0000:03:00.0", device(t, naive, "ROCm0").Card, "by order, the lower address")
	require.Equal(t, "order", device(t, naive, "ROCm0").Match)
	requireMiB(t, ptr(-837.48), device(t, naive, "ROCm0").NotAttributedMiB, "by order")
	require.Contains(t, naive.Flags, FlagDeviceOrder)
	require.Contains(t, naive.Flags, FlagDeviceOverCard)
	require.Contains(t, strings.Join(naive.Detail.Warnings, "\n"), "matched to the cards by their order (ROCm0 = 0000:03:00.0, ROCm1 = 0000:83:00.0)")
}

// The older build of testdata/devices/2xrocm-order prints no address and
// its devices are in the default order: matched by order, said so.
func TestDeviceMatchByOrder(t *testing.T) {
	t.Parallel()
	dir := devicesDir("2xrocm-order")
	r := foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt")).Report()
	r0, r1 := device(t, r, "ROCm0"), device(t, r, "ROCm1")
	require.Equal(t, "", r0.PCI)
	require.Equal(t, "order", r0.Match)
	require.Equal(t, "0000:03:00.0", r0.Card)
	require.Equal(t, "0000:83:00.0", r1.Card)
	requireMiB(t, ptr(255.23), r0.NotAttributedMiB, "ROCm0")
	requireMiB(t, ptr(316.52), r1.NotAttributedMiB, "ROCm1")
	require.Contains(t, r.Flags, FlagDeviceOrder)
	require.NotContains(t, r.Flags, FlagDeviceOverCard)
}

func TestNormPCI(t *testing.T) {
	t.Parallel()
	require.Equal(t, "0000:c5:00.0", normPCI("0000:C5:00.0"))
	require.Equal(t, "0000:01:00.0", normPCI("01:00.0"))
	require.Equal(t, "", normPCI("GPU-8d1b2c3e"))
}

// A card checked on its own, not summed with the others: the card of
// ROCm0 held 125.48 MiB less VRAM than ROCm0's buffers, while both cards
// together held 129.75 MiB more than both devices.
func TestDeviceOverItsCard(t *testing.T) {
	t.Parallel()
	r := twoCards(t, "gtt-over.txt")
	var cards, devs float64
	for _, k := range r.Cards {
		cards += float64(region(k, "vram").PeakMiB)
		devs += float64(*k.AttributedMiB)
	}
	require.InDelta(t, 129.75, cards-devs, 1e-6, "summed, the devices fit")
	requireMiB(t, ptr(-125.48), device(t, r, "ROCm0").NotAttributedMiB, "ROCm0")
	require.Contains(t, r.Flags, FlagDeviceOverCard)
	var fail []string
	for _, c := range checksNamed(r, "device_vs_card") {
		if c.Status == StatusFail {
			fail = append(fail, c.Detail)
		}
	}
	require.Len(t, fail, 1)
	require.Contains(t, fail[0], "ROCm0 on 0000:83:00.0 (amdgpu, VRAM): the log attributes 10525.5 MiB, 125.5 MiB MORE than the card's VRAM peak 10400.0 MiB")
}

// The per-card figures are a function of the set of lines and samples:
// shuffled, duplicated and persisted delivery give the same report.
func TestDeviceTableOrderFree(t *testing.T) {
	t.Parallel()
	dir := devicesDir("2xrocm-pci")
	log, err := os.ReadFile(filepath.Join(dir, "split.log"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "gtt.txt"))
	require.NoError(t, err)
	ss, _, err := ParseSamples(b)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	ref := NewFold(Options{})
	for i, l := range lines {
		ref.AddLine(Line{Stream: "stderr", Seq: uint64(i + 1), Text: l})
	}
	for _, s := range ss {
		ref.AddSample(s)
	}
	want := reportJSON(t, ref)
	require.Contains(t, want, `"cards"`)
	rng := rand.New(rand.NewPCG(7, 26))
	for range 5 {
		f := NewFold(Options{})
		order := rng.Perm(len(lines) + len(ss))
		for _, k := range append(order, order[:len(order)/3]...) {
			if k < len(lines) {
				f.AddLine(Line{Stream: "stderr", Seq: uint64(k + 1), Text: lines[k]})
			} else {
				f.AddSample(ss[k-len(lines)])
			}
		}
		st, err := f.MarshalJSON()
		require.NoError(t, err)
		g := NewFold(Options{})
		require.NoError(t, g.UnmarshalJSON(st))
		require.Equal(t, want, reportJSON(t, g))
	}
}

// A card's own memory is the larger of its VRAM and GTT: an APU's small
// carve-out holds less than its GTT even when a device's buffers would fit
// in it (the 4B run's offload-off control: 43.21 MiB of compute buffers,
// 116 MiB of VRAM, 753.30 MiB of GTT); judged against the VRAM, the card
// would look discrete and 62.7 % of it not attributed.
func TestCardMemoryClass(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "testdata", "controls", "4b-ngl0")
	f := foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt"))
	r, c := f.report()
	require.Nil(t, r.Cards, "one device on an APU: the headline is its table")
	cards := cardRows(&f.st.Ticks)
	matchDevices(c.devs, cards)
	var apu *cardRow
	for _, k := range cards {
		k.classify()
		if k.PDev == "0000:c5:00.0" {
			apu = k
		}
	}
	require.NotNil(t, apu)
	require.Equal(t, "gtt", apu.Memory)
	require.InDelta(t, 116.0, apu.peak[MemVRAM], 1e-9)
	apu.account(c.devs, nil, 1, 10, false)
	requireMiB(t, ptr(710.09), apu.NotAttributedMiB, "against its GTT")

	// A discrete card: its VRAM, and the GTT beside it.
	r = twoCards(t, "gtt.txt")
	require.Equal(t, "vram", card(t, r, "0000:03:00.0").Memory)
}

func ptr(v float64) *float64 { return &v }

// TestDeviceRowsRules: how buffer types become rows of the device table.
func TestDeviceRowsRules(t *testing.T) {
	t.Parallel()
	fold := func(lines ...string) []*devRow {
		f := NewFold(Options{})
		_, err := f.ReadLog(strings.NewReader(strings.Join(lines, "\n")+"\n"), "log")
		require.NoError(t, err)
		_, c := f.report()
		return c.devs
	}
	names := func(rows []*devRow) string {
		var out []string
		for _, r := range rows {
			s := r.Kind + ":" + r.Name
			if len(r.Spans) > 0 {
				s += "(" + strings.Join(r.Spans, ",") + ")"
			}
			out = append(out, fmt.Sprintf("%s=%.2f/%.2f/%.2f", s, r.model, r.state, r.compute))
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"a split buffer of the backend's only device is that device's",
			[]string{"load_tensors:         HRX0 model buffer size =  1127.43 MiB", "load_tensors:   HRX0_Split model buffer size =  1248.48 MiB"},
			"device:HRX0=2375.91/0.00/0.00"},
		{"a row split over several devices is a row of its own",
			[]string{"load_tensors:  ROCm0_Split model buffer size =  8000.00 MiB", "load_tensors:        ROCm0 model buffer size =   300.00 MiB",
				"load_tensors:        ROCm1 model buffer size =   200.00 MiB"},
			"device:ROCm0=300.00/0.00/0.00 device:ROCm1=200.00/0.00/0.00 split:ROCm0_Split(ROCm0,ROCm1)=8000.00/0.00/0.00"},
		{"a split row's spans in the backend's order, whichever the log names first",
			[]string{"load_tensors:        CUDA1 model buffer size =   200.00 MiB", "load_tensors:        CUDA0 model buffer size =   300.00 MiB",
				"load_tensors:  CUDA0_Split model buffer size =  8000.00 MiB"},
			"device:CUDA0=300.00/0.00/0.00 device:CUDA1=200.00/0.00/0.00 split:CUDA0_Split(CUDA0,CUDA1)=8000.00/0.00/0.00"},
		{"a tensor-split meta buffer spans its buffer types' devices",
			[]string{"load_tensors: Meta(CUDA0,CUDA1) model buffer size =  9000.00 MiB", "load_tensors:        CUDA0 model buffer size =   100.00 MiB"},
			"device:CUDA0=100.00/0.00/0.00 device:CUDA1=0.00/0.00/0.00 split:Meta(CUDA0,CUDA1)(CUDA0,CUDA1)=9000.00/0.00/0.00"},
		{"Metal's mapped and private buffers are the device",
			[]string{"load_tensors:  MTL0_Mapped model buffer size =  4000.00 MiB", "load_tensors: MTL0_Private model buffer size =    50.00 MiB"},
			"device:MTL0=4050.00/0.00/0.00"},
		{"pinned, host and remote rows",
			[]string{"load_tensors:    CUDA_Host model buffer size =  2445.64 MiB", "load_tensors:   CPU_REPACK model buffer size =   100.00 MiB",
				"load_tensors:   CPU_Mapped model buffer size =    10.00 MiB", "load_tensors: RPC0[10.0.0.2:50052] model buffer size =  5000.00 MiB",
				"load_tensors:        CUDA0 model buffer size =  7000.00 MiB"},
			"device:CUDA0=7000.00/0.00/0.00 pinned:CUDA_Host=2445.64/0.00/0.00 host:Host=110.00/0.00/0.00 remote:RPC0=5000.00/0.00/0.00"},
		{"DeepSeek-V4's compressed KV is KV",
			[]string{"load_tensors:        CUDA0 model buffer size =  7000.00 MiB", "llama_context: constructing llama_context",
				"llama_memory_hybrid_iswa:      CUDA0 DeepSeek4 compressed KV buffer size =  2450.00 MiB",
				"llama_kv_cache:        CPU KV buffer size =    64.00 MiB"},
			"device:CUDA0=7000.00/2450.00/0.00 host:Host=0.00/64.00/0.00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, names(fold(tc.lines...)))
		})
	}
}

// FuzzDevicesSumToTotals: whatever buffer lines a log holds, the rows of
// the device table add up to the report's rows (to the 0.01 MiB the
// lines print): the device, split and pinned rows to model_gtt_mib,
// state_mib and compute_mib, the host row to model_host_mib,
// detail.host_kv_mib and detail.host_compute_mib.
func FuzzDevicesSumToTotals(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint64(1))
	f.Add([]byte("multi-device run with splits and pinned buffers"), uint64(26))
	f.Add(bytes.Repeat([]byte{3, 250, 17, 99}, 40), uint64(9))
	f.Fuzz(func(t *testing.T, plan []byte, seed uint64) {
		log := deviceLog(plan, seed)
		fo := NewFold(Options{})
		if _, err := fo.ReadLog(strings.NewReader(log), "log"); err != nil {
			t.Fatal(err)
		}
		r, c := fo.report()
		requireDevicesSum(t, r, c.devs, log)
	})
}

// TestDevicesSumToTotals is the property on the repository's logs.
func TestDevicesSumToTotals(t *testing.T) {
	t.Parallel()
	var logs []string
	for _, g := range []string{"runs/*/split.log", "controls/*/split.log", "logs/*.log", "logs/real/*/llama.log", "devices/*/split.log"} {
		m, err := filepath.Glob(filepath.Join("..", "..", "testdata", filepath.FromSlash(g)))
		require.NoError(t, err)
		logs = append(logs, m...)
	}
	require.Greater(t, len(logs), 40)
	for _, p := range logs {
		fo := foldFiles(t, p, "")
		r, c := fo.report()
		requireDevicesSum(t, r, c.devs, p)
	}
	rng := rand.New(rand.NewPCG(26, 1))
	for i := range 300 {
		plan := make([]byte, 8+rng.IntN(120))
		for j := range plan {
			plan[j] = byte(rng.Uint32())
		}
		log := deviceLog(plan, uint64(i))
		fo := NewFold(Options{})
		_, err := fo.ReadLog(strings.NewReader(log), "log")
		require.NoError(t, err)
		r, c := fo.report()
		requireDevicesSum(t, r, c.devs, log)
	}
}

// cents is a figure in hundredths of a MiB, as the report rounds it.
func cents(v float64) int64 { return int64(round2(v)*100 + 0.5*sign(v)) }

func sign(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}

func requireDevicesSum(t *testing.T, r Report, devs []*devRow, what string) {
	t.Helper()
	var gpu, host [3]int64
	var sawHost bool
	for _, d := range devs {
		v := [3]int64{cents(d.model), cents(d.state), cents(d.compute)}
		for i, p := range []*MiB{d.ModelMiB, d.StateMiB, d.ComputeMiB} {
			if p != nil && cents(float64(*p)) != v[i] {
				t.Fatalf("%s: %s's figure %v is not its lines' sum %d", what, d.Name, *p, v[i])
			}
		}
		switch d.Kind {
		case DeviceGPU, DeviceSplit, DevicePinned:
			for i := range v {
				gpu[i] += v[i]
			}
		case DeviceHost:
			sawHost = true
			host = v
		}
	}
	want := func(name string, got int64, total *MiB) {
		t.Helper()
		if total == nil {
			for _, d := range devs {
				if d.Kind != DeviceRemote && d.Kind != DeviceHost && name != "host model" {
					if p := map[string]*MiB{"model": d.ModelMiB, "state": d.StateMiB, "compute": d.ComputeMiB}[name]; p != nil {
						t.Fatalf("%s: the %s row is unknown but %s's is %v", what, name, d.Name, *p)
					}
				}
			}
			return
		}
		if got != cents(float64(*total)) {
			t.Fatalf("%s: the devices' %s adds up to %d cents, the row is %v\n%s", what, name, got, *total, what)
		}
	}
	want("model", gpu[0], r.ModelGTTMiB)
	want("state", gpu[1], r.StateMiB)
	want("compute", gpu[2], r.ComputeMiB)
	if r.ModelHostMiB != nil {
		want("host model", host[0], r.ModelHostMiB)
	}
	if r.StateMiB != nil && host[1] != cents(float64(r.Detail.HostKVMiB)) {
		t.Fatalf("%s: host KV %d cents, detail %v", what, host[1], r.Detail.HostKVMiB)
	}
	if r.ComputeMiB != nil && host[2] != cents(float64(r.Detail.HostComputeMiB)) {
		t.Fatalf("%s: host compute %d cents, detail %v", what, host[2], r.Detail.HostComputeMiB)
	}
	if !sawHost && (r.ModelHostMiB != nil && *r.ModelHostMiB != 0) {
		t.Fatalf("%s: no host row, host model %v", what, *r.ModelHostMiB)
	}
}

// deviceLog makes a llama.cpp log from plan: loads, contexts and buffer
// lines of every kind on devices of several backends, with split, meta,
// pinned, host and remote buffer types, figures printed as llama.cpp
// prints them (%8.2f).
func deviceLog(plan []byte, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, uint64(len(plan))))
	names := []string{"CUDA0", "CUDA1", "CUDA2", "ROCm0", "ROCm1", "Vulkan0", "HRX0", "MTL0_Mapped", "SYCL0",
		"CUDA0_Split", "ROCm0_Split", "CUDA_Split", "Meta(CUDA0,CUDA1)", "CUDA_Host", "ROCm_Host", "Vulkan_Host",
		"CPU", "CPU_Mapped", "CPU_REPACK", "AMX", "RPC0[10.0.0.2:50052]", "RPC[10.0.0.3:50052]"}
	kinds := []string{"model", "KV", "RS", "compute", " output", "DSV4 compressor state", "DeepSeek4 compressed KV", "LoRA"}
	var b strings.Builder
	b.WriteString("build: 6550 (7a5e1b2c4) with cc for x86_64\n")
	for i, p := range plan {
		switch p % 16 {
		case 0:
			fmt.Fprintf(&b, "llama_model_loader: loaded meta data with 30 key-value pairs and 100 tensors from m%d.gguf (version GGUF V3 (latest))\n", p%3)
		case 1:
			b.WriteString("llama_context: constructing llama_context\n")
		case 2:
			fmt.Fprintf(&b, "llama_model_load_from_file_impl: using device %s (GPU) - 1000 MiB free\n", names[int(p/16)%9])
		default:
			name := names[rng.IntN(len(names))]
			kind := kinds[int(p>>4)%len(kinds)]
			fn := map[string]string{"model": "load_tensors", "KV": "llama_kv_cache", "RS": "llama_memory_recurrent", "compute": "sched_reserve", " output": "llama_context"}[kind]
			if fn == "" {
				fn = "llama_memory_hybrid_iswa"
			}
			v := float64(rng.IntN(2000000)) / 100
			if i%7 == 0 {
				v = 0
			}
			fmt.Fprintf(&b, "%s: %12s %s buffer size = %8.2f MiB\n", fn, name, kind, v)
		}
	}
	return b.String()
}
