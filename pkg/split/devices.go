package split

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// The device table (docs/accounting.md rules 16 to 18): the counted
// buffer lines of the live loads regrouped by the llama.cpp device they
// are on, so the rows of every device add up to the headline's rows. It
// is built from the lines the rows were summed from, nothing else.

// devRow is a row of the device table being built.
type devRow struct {
	Device
	model, state, compute float64
	family                string
	index                 int      // the device's number (CUDA1: 1), -1 for none
	cardRow               *cardRow // the card it was matched to
}

// deviceFamily splits a device name into its backend and its number:
// "CUDA1" is ("CUDA", 1), "Metal" ("Metal", -1). A buffer type named by
// its device ("AMD Radeon RX 6800", some Vulkan builds) is a device of its
// own, of no numbered backend.
func deviceFamily(name string) (string, int) {
	if strings.ContainsRune(name, ' ') {
		return name, -1
	}
	i := len(name)
	for i > 0 && isDigit(name[i-1]) {
		i--
	}
	if i == len(name) || i == 0 {
		return name, -1
	}
	n, err := strconv.Atoi(name[i:])
	if err != nil {
		return name, -1
	}
	return name[:i], n
}

// bufferDevice says where a buffer type's lines go: the row's name and
// kind. A device's variants (Metal's MTL0_Mapped, MTL0_Private) are the
// device; a split buffer (CUDA0_Split, Meta(...)) is a row of its own
// until resolveSplit finds it on one device; a remote device is keyed by
// its name before the address ("RPC0[10.0.0.2:50052]" is RPC0, as its
// "using device" line names it).
func bufferDevice(name string) (row, kind string) {
	switch {
	case IsRemoteBuffer(name):
		if i := strings.IndexByte(name, '['); i > 0 {
			if _, n := deviceFamily(name[:i]); n >= 0 {
				return name[:i], DeviceRemote
			}
		}
		return name, DeviceRemote
	case IsHostBuffer(name):
		return "Host", DeviceHost
	case IsPinnedHostBuffer(name):
		return name, DevicePinned
	case strings.HasPrefix(name, "Meta(") || strings.HasSuffix(name, "_Split"):
		return name, DeviceSplit
	}
	for _, suf := range []string{"_Mapped", "_Private"} {
		if b, ok := strings.CutSuffix(name, suf); ok && b != "" {
			return b, DeviceGPU
		}
	}
	return name, DeviceGPU
}

// splitSpans lists the devices a split buffer type may be spread over:
// for Meta(a,b,...) the devices of its buffer types, for X_Split every
// device of X's backend (llama.cpp's row split spreads each tensor over
// all of them, and prints no device's share).
func splitSpans(name string, devs []string) []string {
	var out []string
	if inner, ok := strings.CutPrefix(name, "Meta("); ok {
		inner = strings.TrimSuffix(inner, ")")
		for _, b := range strings.Split(inner, ",") {
			if d, k := bufferDevice(strings.TrimSpace(b)); k == DeviceGPU && d != "" && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
		return out
	}
	base := strings.TrimSuffix(name, "_Split")
	fam, _ := deviceFamily(base)
	for _, d := range devs {
		if f, _ := deviceFamily(d); f == fam {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		if _, n := deviceFamily(base); n >= 0 {
			out = append(out, base) // its backend's only device the log names
		}
	}
	return out
}

// lineClass is what a counted buffer line holds: "model", "state" or
// "compute" (compute and output).
func lineClass(bl BufferLine) string {
	if bl.Kind == "model" || strings.HasSuffix(bl.Kind, " model") {
		return "model"
	}
	switch bufferRow(llamalog.Record{Func: bl.Func, BufKind: bl.Kind}) {
	case "kv", "rs", "state":
		return "state"
	}
	return "compute"
}

// deviceRows builds the device table from the live loads' counted buffer
// lines (the detail's buffers and remote buffers) and the devices the
// live loads' "using device" lines name.
func (c *computation) deviceRows(rd *logReader, live []*loadAcc) {
	d := &c.r.Detail
	lines := slices.Concat(d.Buffers, d.Remote)
	devs := processDevices(live, lines)
	t := devTable{rows: map[string]*devRow{}, info: rd.devInfo}
	for _, n := range devs {
		t.get(n, DeviceGPU)
	}
	for _, l := range live {
		for _, n := range l.devices {
			if row, kind := bufferDevice(n); kind == DeviceRemote {
				t.get(row, kind)
			}
		}
	}
	for _, bl := range lines {
		if bl.Row != "unknown" { // listed, in no row (an mmproj's weights on an unnamed backend)
			t.add(bl, devs)
		}
	}
	c.devs = t.sorted(c.r.ModelGTTMiB, c.r.ModelHostMiB, c.r.StateMiB, c.r.ComputeMiB)
}

// processDevices lists the GPU devices of the process: those the live
// loads' "using device" lines name and those their buffer lines are on (a
// split buffer is spread over its backend's devices among them), in the
// backends' order of their devices.
func processDevices(live []*loadAcc, lines []BufferLine) []string {
	var devs []string
	addDev := func(n string) {
		if n != "" && !slices.Contains(devs, n) {
			devs = append(devs, n)
		}
	}
	for _, l := range live {
		for _, n := range l.devices {
			if row, kind := bufferDevice(n); kind == DeviceGPU {
				addDev(row)
			}
		}
	}
	for _, bl := range lines {
		if bl.Row == "unknown" {
			continue
		}
		switch row, kind := bufferDevice(bl.Name); {
		case kind == DeviceGPU:
			addDev(row)
		case strings.HasPrefix(bl.Name, "Meta("):
			for _, d := range splitSpans(bl.Name, nil) {
				addDev(d)
			}
		}
	}
	sort.SliceStable(devs, func(i, j int) bool {
		fi, ni := deviceFamily(devs[i])
		fj, nj := deviceFamily(devs[j])
		if fi != fj {
			return fi < fj
		}
		return ni < nj
	})
	return devs
}

// devTable is the device table being built: a row per kind and name.
type devTable struct {
	rows map[string]*devRow
	info map[string]*llamalog.Record // the "using device" lines by device
}

// get returns the row of a device of a kind, made on first use (with what
// its "using device" line says).
func (t *devTable) get(name, kind string) *devRow {
	k := kind + "\x00" + name
	if r := t.rows[k]; r != nil {
		return r
	}
	fam, idx := deviceFamily(name)
	r := &devRow{Device: Device{Name: name, Kind: kind, BufferTypes: []string{}}, family: fam, index: idx}
	if info := t.info[name]; info != nil && (kind == DeviceGPU || kind == DeviceRemote) {
		r.Description, r.PCI, r.FreeMiB, r.Line = info.Text, info.BufKind, mib(info.MiB), info.Seq
	}
	t.rows[k] = r
	return r
}

// add counts a buffer line in the row of its device (a split buffer
// spread over one device is that device's).
func (t *devTable) add(bl BufferLine, devs []string) {
	name, kind := bufferDevice(bl.Name)
	var spans []string
	if kind == DeviceSplit {
		if spans = splitSpans(bl.Name, devs); len(spans) == 1 {
			name, kind, spans = spans[0], DeviceGPU, nil
		}
	}
	r := t.get(name, kind)
	if kind == DeviceSplit && r.Spans == nil {
		r.Spans = spans
	}
	if !slices.Contains(r.BufferTypes, bl.Name) {
		r.BufferTypes = append(r.BufferTypes, bl.Name)
	}
	switch cl := lineClass(bl); {
	case bl.Row == "model_host" || cl == "model":
		r.model += float64(bl.MiB)
	case cl == "state":
		r.state += float64(bl.MiB)
	default:
		r.compute += float64(bl.MiB)
	}
}

// sorted returns the rows with their figures (null where the report's row
// is: the host row's model is the CPU model buffer), devices first, by
// backend and number.
func (t *devTable) sorted(model, host, state, comp *MiB) []*devRow {
	out := make([]*devRow, 0, len(t.rows))
	for _, r := range t.rows {
		m := model
		if r.Kind == DeviceHost {
			m = host
		}
		if m != nil {
			r.ModelMiB = mib(r.model)
		}
		if state != nil {
			r.StateMiB = mib(r.state)
		}
		if comp != nil {
			r.ComputeMiB = mib(r.compute)
		}
		out = append(out, r)
	}
	rank := map[string]int{DeviceGPU: 0, DeviceSplit: 1, DevicePinned: 2, DeviceHost: 3, DeviceRemote: 4}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank[a.Kind] != rank[b.Kind] {
			return rank[a.Kind] < rank[b.Kind]
		}
		if a.family != b.family {
			return a.family < b.family
		}
		if a.index != b.index {
			return a.index < b.index
		}
		return a.Name < b.Name
	})
	return out
}

// gpuRows counts the rows of GPU memory: devices, split, pinned and
// remote rows.
func gpuRows(rows []*devRow) int {
	n := 0
	for _, r := range rows {
		if r.Kind != DeviceHost {
			n++
		}
	}
	return n
}

// attributed is what a device, split or pinned row holds in all: model +
// KV/state + compute/output (unknown rows count 0); ok is false when its
// model row is unknown.
func (r *devRow) attributed() (float64, bool) {
	return r.model + r.state + r.compute, r.ModelMiB != nil
}
