package split

import (
	"bytes"
	"strconv"
)

// FDVerdict says what an fdinfo text is.
type FDVerdict uint8

// FD verdicts.
const (
	FDNotDRM      FDVerdict = iota // no drm-driver key: a file, socket, eventfd, dma-buf, kfd ...
	FDOtherDriver                  // a DRM client of another driver (xe, i915, amdxdna ...)
	FDAmdgpu                       // an amdgpu client with a GTT figure
	FDMalformed                    // amdgpu, but no client id or no parsable GTT key
	FDUnsupported                  // amdgpu before kernel 5.19 ("gtt mem:") without a pasid to key it on
)

// DRMClient is the part of one fd's fdinfo that the split uses.
type DRMClient struct {
	Driver   string
	PDev     string
	ClientID string
	// GTTBytes is drm-total-gtt when present, else drm-memory-gtt.
	GTTBytes int64
	// Key names the key GTTBytes came from.
	Key string
	// Mem is the client's memory by region class (MemVRAM, MemGTT,
	// MemCPU), for the drivers whose regions gttsplit reads (amdgpu, xe,
	// i915; see RegionClass): per region drm-total-<region>, else the
	// resident drm-memory-<region> (amdgpu), else amdgpu's "<region>
	// mem" before kernel 5.19. It is filled for FDAmdgpu and for an xe or
	// i915 client (FDOtherDriver).
	Mem ClientMem
}

// Region classes: where a DRM client's memory lives (docs/accounting.md
// rule 17).
const (
	MemVRAM = iota // the card's own memory: amdgpu vram, xe vram0/vram1, i915 local0
	MemGTT         // system memory mapped for the GPU: amdgpu and xe gtt, i915 system0
	MemCPU         // system memory the GPU does not map: amdgpu cpu, xe system
	NumMemClasses
)

// MemClassName names a region class in reports ("vram", "gtt", "cpu").
var MemClassName = [NumMemClasses]string{"vram", "gtt", "cpu"}

// ClientMem is one client's memory by region class.
type ClientMem struct {
	Bytes [NumMemClasses]int64
	// Seen has bit c set when class c had a figure; Resident when one of
	// its figures was resident memory only (drm-memory-*, "<r> mem").
	Seen, Resident uint8
	// Regions names, per class, the kernel's regions summed into it
	// ("vram0+vram1").
	Regions [NumMemClasses]string
	// Skipped counts region figures that did not parse (left out).
	Skipped int
}

// RegionClass is the class of a driver's memory region, or -1 for a
// region that is none of them (stolen memory, amdgpu's gds/gws/oa/
// doorbell, a driver gttsplit does not read).
func RegionClass(driver, region string) int { return regionClass(driver, []byte(region)) }

// regionClass is RegionClass of a region's bytes (a switch on string(b)
// makes no string).
func regionClass(driver string, b []byte) int {
	switch region := string(b); driver {
	case "amdgpu":
		switch region {
		case "vram":
			return MemVRAM
		case "gtt":
			return MemGTT
		case "cpu":
			return MemCPU
		}
	case "xe":
		switch {
		case len(region) >= 4 && region[:4] == "vram":
			return MemVRAM
		case region == "gtt":
			return MemGTT
		case region == "system":
			return MemCPU
		}
	case "i915":
		switch {
		case len(region) >= 5 && region[:5] == "local":
			return MemVRAM
		case len(region) >= 6 && region[:6] == "system":
			return MemGTT
		}
	}
	return -1
}

// regionVal is one memory key of an fdinfo text: its region and value.
type regionVal struct {
	region, val []byte
	family      uint8 // 0 drm-total-, 1 drm-memory-, 2 "<region> mem"
}

// ParseFDInfo parses one /proc/<pid>/fdinfo/<fd> text (docs/formats.md, "fdinfo"). Only
// amdgpu clients get FDAmdgpu. Duplicate keys keep their first occurrence
// (kernels 6.5 to about 6.7 print the client id twice). A text cut off
// mid-line (no final newline) loses only its last line.
func ParseFDInfo(text []byte) (DRMClient, FDVerdict) {
	var regs memKeys
	c, v := parseFDInfo(text, &regs)
	if v == FDAmdgpu || v == FDOtherDriver {
		c.Mem = regs.mem(c.Driver)
	}
	return c, v
}

// memKeys are the memory keys of an fdinfo text, in order (amdgpu prints
// at most 10); mem sums them (clientMem). The fold sums them only for a
// client it has not counted yet.
type memKeys struct {
	r [16]regionVal
	n int
}

func (k *memKeys) mem(driver string) ClientMem { return clientMem(driver, k.r[:k.n]) }

// parseFDInfo is ParseFDInfo without the client's memory by region: its
// keys are left in regs.
func parseFDInfo(text []byte, keys *memKeys) (DRMClient, FDVerdict) {
	var t fdKeys
	regs := &keys.r
	nreg := 0
	for len(text) > 0 {
		nl := bytes.IndexByte(text, '\n')
		var line []byte
		if nl < 0 {
			// a truncated last line is not trusted
			break
		}
		line, text = text[:nl], text[nl+1:]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		key := bytes.TrimSpace(line[:colon])
		val := bytes.TrimSpace(line[colon+1:])
		t.read(key, val)
		// Memory keys are drm-total-*, drm-memory-* and "<r> mem": most
		// lines are told apart by two bytes.
		if nreg < len(regs) && len(key) > 4 && (key[3] == '-' && (key[4] == 't' || key[4] == 'm') || key[len(key)-4] == ' ') {
			if rv, ok := memoryKey(key, val); ok {
				regs[nreg] = rv
				nreg++
			}
		}
	}
	keys.n = nreg
	return t.client()
}

// fdKeys is what parseFDInfo reads of an fdinfo text: the first value of
// each key the client is told by.
type fdKeys struct {
	c                                     DRMClient
	total, memory, oldGTT, oldPDev, pasid []byte
	haveDriver, haveClient, havePDev      bool
}

// read takes one key of the text.
func (t *fdKeys) read(key, val []byte) {
	switch string(key) {
	case "drm-driver":
		if !t.haveDriver {
			t.c.Driver, t.haveDriver = string(val), true
		}
	case "drm-client-id":
		if !t.haveClient {
			t.c.ClientID, t.haveClient = string(val), true
		}
	case "drm-pdev":
		if !t.havePDev {
			t.c.PDev, t.havePDev = string(val), true
		}
	case "drm-total-gtt":
		if t.total == nil {
			t.total = val
		}
	case "drm-memory-gtt":
		if t.memory == nil {
			t.memory = val
		}
	// amdgpu before kernel 5.19: "pdev:", "pasid:", "gtt mem:\t%llu kB"
	case "gtt mem":
		if t.oldGTT == nil {
			t.oldGTT = val
		}
	case "pdev":
		if t.oldPDev == nil {
			t.oldPDev = val
		}
	case "pasid":
		if t.pasid == nil {
			t.pasid = val
		}
	}
}

// client is the client the text describes, and what it is.
func (t *fdKeys) client() (DRMClient, FDVerdict) {
	c := t.c
	if !t.haveDriver {
		if t.oldGTT == nil {
			return c, FDNotDRM
		}
		// Kernels 5.14 to 5.18 print no client id; a pasid names the
		// drm_file's VM, one per open, so it keys the client as well.
		if len(t.pasid) == 0 {
			return c, FDUnsupported
		}
		v, ok := ParseSize(t.oldGTT)
		if !ok {
			return c, FDMalformed
		}
		c.Driver, c.PDev, c.ClientID, c.GTTBytes, c.Key = "amdgpu", string(t.oldPDev), "pasid-"+string(t.pasid), v, "gtt mem"
		return c, FDAmdgpu
	}
	if c.Driver != "amdgpu" {
		return c, FDOtherDriver
	}
	if !t.haveClient || c.ClientID == "" {
		return c, FDMalformed
	}
	var ok bool
	switch {
	case t.total != nil:
		c.GTTBytes, ok = ParseSize(t.total)
		c.Key = "drm-total-gtt"
	case t.memory != nil:
		c.GTTBytes, ok = ParseSize(t.memory)
		c.Key = "drm-memory-gtt"
	}
	if !ok {
		return c, FDMalformed
	}
	return c, FDAmdgpu
}

// memoryKey reads a memory key of an fdinfo line: drm-total-<region>
// (not drm-total-cycles-<engine>, which is no memory), drm-memory-<region>
// and amdgpu's "<region> mem" before kernel 5.19.
func memoryKey(key, val []byte) (regionVal, bool) {
	switch {
	case bytes.HasPrefix(key, []byte("drm-total-")):
		r := key[len("drm-total-"):]
		if len(r) == 0 || bytes.HasPrefix(r, []byte("cycles-")) {
			return regionVal{}, false
		}
		return regionVal{region: r, val: val, family: 0}, true
	case bytes.HasPrefix(key, []byte("drm-memory-")):
		r := key[len("drm-memory-"):]
		if len(r) == 0 {
			return regionVal{}, false
		}
		return regionVal{region: r, val: val, family: 1}, true
	case bytes.HasSuffix(key, []byte(" mem")) && len(key) > 4:
		return regionVal{region: key[:len(key)-4], val: val, family: 2}, true
	}
	return regionVal{}, false
}

// clientMem sums a client's regions by class: per region the first of
// drm-total-, drm-memory- and "<region> mem" the text has (of a key
// printed twice, the first).
func clientMem(driver string, rs []regionVal) ClientMem {
	var m ClientMem
	if driver != "amdgpu" && driver != "xe" && driver != "i915" {
		return m
	}
	type pick struct {
		regionVal
		cl int
	}
	var picks [12]pick
	n := 0
	for _, rv := range rs {
		cl := regionClass(driver, rv.region)
		if cl < 0 {
			continue
		}
		j := 0
		for j < n && !bytes.Equal(picks[j].region, rv.region) {
			j++
		}
		switch {
		case j < n:
			if rv.family < picks[j].family {
				picks[j] = pick{rv, cl}
			}
		case n < len(picks):
			picks[n] = pick{rv, cl}
			n++
		}
	}
	for _, p := range picks[:n] {
		v, ok := ParseSize(p.val)
		if !ok {
			m.Skipped++
			continue
		}
		cl := p.cl
		m.Bytes[cl] += v
		m.Seen |= 1 << cl
		if p.family > 0 {
			m.Resident |= 1 << cl
		}
		if m.Regions[cl] == "" {
			m.Regions[cl] = regionName(p.region)
		} else {
			m.Regions[cl] += "+" + regionName(p.region)
		}
	}
	return m
}

// ParseSize parses a DRM fdinfo memory value: "<uint>" (bytes), or
// "<uint> KiB|MiB|GiB" (also "kB"). It rejects anything else.
func ParseSize(v []byte) (int64, bool) {
	v = bytes.TrimSpace(v)
	i := 0
	for i < len(v) && isDigit(v[i]) {
		i++
	}
	if i == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v[:i]), 10, 64)
	if err != nil {
		return 0, false
	}
	var shift uint
	switch string(bytes.TrimSpace(v[i:])) {
	case "":
	case "KiB", "kB", "KB":
		shift = 10
	case "MiB":
		shift = 20
	case "GiB":
		shift = 30
	default:
		return 0, false
	}
	if n > (1<<62)>>shift {
		return 0, false
	}
	return n << shift, true
}

// regionName is a region's name as a string, the usual ones without
// making one.
func regionName(b []byte) string {
	switch string(b) {
	case "vram":
		return "vram"
	case "gtt":
		return "gtt"
	case "cpu":
		return "cpu"
	case "vram0":
		return "vram0"
	case "vram1":
		return "vram1"
	case "system":
		return "system"
	case "system0":
		return "system0"
	case "local0":
		return "local0"
	}
	return string(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
