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
}

// ParseFDInfo parses one /proc/<pid>/fdinfo/<fd> text (docs/formats.md, "fdinfo"). Only
// amdgpu clients get FDAmdgpu. Duplicate keys keep their first occurrence
// (kernels 6.5 to about 6.7 print the client id twice). A text cut off
// mid-line (no final newline) loses only its last line.
func ParseFDInfo(text []byte) (DRMClient, FDVerdict) {
	var c DRMClient
	var total, memory, oldGTT, oldPDev, pasid []byte
	var haveDriver, haveClient, havePDev bool
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
		return c, FDAmdgpu
	}
	if c.Driver != "amdgpu" {
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
	return c, FDAmdgpu
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
