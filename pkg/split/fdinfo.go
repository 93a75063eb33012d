package split

import (
	"bytes"
	"strconv"
	"strings"
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
func RegionClass(driver, region string) int {
	switch driver {
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
		case strings.HasPrefix(region, "vram"):
			return MemVRAM
		case region == "gtt":
			return MemGTT
		case region == "system":
			return MemCPU
		}
	case "i915":
		switch {
		case strings.HasPrefix(region, "local"):
			return MemVRAM
		case strings.HasPrefix(region, "system"):
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
	var c DRMClient
	var total, memory, oldGTT, oldPDev, pasid []byte
	var haveDriver, haveClient, havePDev bool
	var regs [16]regionVal // the memory keys, first occurrence each
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
		switch string(key) {
		case "drm-driver":
			if !haveDriver {
				c.Driver, haveDriver = string(val), true
			}
		case "drm-client-id":
			if !haveClient {
				c.ClientID, haveClient = string(val), true
			}
		case "drm-pdev":
			if !havePDev {
				c.PDev, havePDev = string(val), true
			}
		case "drm-total-gtt":
			if total == nil {
				total = val
			}
		case "drm-memory-gtt":
			if memory == nil {
				memory = val
			}
		// amdgpu before kernel 5.19: "pdev:", "pasid:", "gtt mem:\t%llu kB"
		case "gtt mem":
			if oldGTT == nil {
				oldGTT = val
			}
		case "pdev":
			if oldPDev == nil {
				oldPDev = val
			}
		case "pasid":
			if pasid == nil {
				pasid = val
			}
		}
		if nreg < len(regs) {
			if rv, ok := memoryKey(key, val); ok && !hasRegion(regs[:nreg], rv) {
				regs[nreg] = rv
				nreg++
			}
		}
	}
	if !haveDriver {
		if oldGTT == nil {
			return c, FDNotDRM
		}
		// Kernels 5.14 to 5.18 print no client id; a pasid names the
		// drm_file's VM, one per open, so it keys the client as well.
		if len(pasid) == 0 {
			return c, FDUnsupported
		}
		v, ok := ParseSize(oldGTT)
		if !ok {
			return c, FDMalformed
		}
		c.Driver, c.PDev, c.ClientID, c.GTTBytes, c.Key = "amdgpu", string(oldPDev), "pasid-"+string(pasid), v, "gtt mem"
		c.Mem = clientMem(c.Driver, regs[:nreg])
		return c, FDAmdgpu
	}
	if c.Driver != "amdgpu" {
		if c.Driver == "xe" || c.Driver == "i915" {
			c.Mem = clientMem(c.Driver, regs[:nreg])
		}
		return c, FDOtherDriver
	}
	if !haveClient || c.ClientID == "" {
		return c, FDMalformed
	}
	var ok bool
	switch {
	case total != nil:
		c.GTTBytes, ok = ParseSize(total)
		c.Key = "drm-total-gtt"
	case memory != nil:
		c.GTTBytes, ok = ParseSize(memory)
		c.Key = "drm-memory-gtt"
	}
	if !ok {
		return c, FDMalformed
	}
	c.Mem = clientMem(c.Driver, regs[:nreg])
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

// hasRegion reports whether rs has rv's key (region and family) already:
// a repeated key keeps its first occurrence.
func hasRegion(rs []regionVal, rv regionVal) bool {
	for _, x := range rs {
		if x.family == rv.family && bytes.Equal(x.region, rv.region) {
			return true
		}
	}
	return false
}

// clientMem sums a client's regions by class: per region the first of
// drm-total-, drm-memory- and "<region> mem" the text has.
func clientMem(driver string, rs []regionVal) ClientMem {
	var m ClientMem
	for i, rv := range rs {
		better := false
		for _, x := range rs {
			if x.family < rv.family && bytes.Equal(x.region, rv.region) {
				better = true
			}
		}
		if better || hasRegion(rs[:i], rv) {
			continue
		}
		cl := RegionClass(driver, string(rv.region))
		if cl < 0 {
			continue
		}
		v, ok := ParseSize(rv.val)
		if !ok {
			m.Skipped++
			continue
		}
		m.Bytes[cl] += v
		m.Seen |= 1 << cl
		if rv.family > 0 {
			m.Resident |= 1 << cl
		}
		if m.Regions[cl] == "" {
			m.Regions[cl] = string(rv.region)
		} else {
			m.Regions[cl] += "+" + string(rv.region)
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
