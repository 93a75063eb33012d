package runtable

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// What a run took in, byte for byte. A run closed complete is final (see
// origin.go): an event that repeats what it folded is a duplicate only if
// it is byte-identical to one of the events it folded; the fold knows an
// event's positions (its lines' and sample's sequence numbers), not its
// bytes. So a run keeps, from its first event on, a fingerprint of every
// event it folded: the first 8 bytes of the SHA-256 of the event as the
// stream delivered it (the structured CloudEvent: id, attributes and
// data).
//
// A run's fingerprints are bounded, as its fold is: up to digestExact
// events they are kept exactly (8 bytes each, sorted); past that they go
// into a Bloom filter of digestFilterBytes (digestHashes bits an event),
// which takes every later one too. The filter never misses an event it
// took (a byte-identical re-send is always a duplicate); of an event it
// did not take, it may say it did, the more likely the more events the
// run had (the tests hold the filter to its false-positive rate): such a re-send is then counted as a
// duplicate rather than dead-lettered, as a state without fingerprints
// does. Either way nothing is folded into a final run.

const (
	// digestExact is the most events whose fingerprints are kept exactly
	// (16 KiB).
	digestExact = 2048
	// digestFilterBytes is the size of the filter past digestExact.
	digestFilterBytes = digestExact * 8
	// digestHashes is the bits the filter sets per event.
	digestHashes = 4
)

// Digests are the fingerprints of the events a run folded. The zero value
// is an empty set. A state without them (nil) was written by an earlier
// version (see finalCheck).
type Digests struct {
	n      uint64   // events taken
	exact  []uint64 // sorted; nil once the filter took over
	filter []byte   // nil up to digestExact events
}

// fingerprint is the fingerprint of an event's bytes.
func fingerprint(data []byte) uint64 {
	h := sha256.Sum256(data)
	return binary.BigEndian.Uint64(h[:8])
}

// Len is the number of events taken.
func (ds *Digests) Len() uint64 { return ds.n }

// Exact reports whether the fingerprints are kept exactly (no filter).
func (ds *Digests) Exact() bool { return ds.filter == nil }

// Add takes the fingerprint of one more event.
func (ds *Digests) Add(fp uint64) {
	ds.n++
	if ds.filter != nil {
		ds.set(fp)
		return
	}
	i, found := slices.BinarySearch(ds.exact, fp)
	if found {
		return
	}
	if len(ds.exact) < digestExact {
		ds.exact = slices.Insert(ds.exact, i, fp)
		return
	}
	ds.filter = make([]byte, digestFilterBytes)
	for _, e := range ds.exact {
		ds.set(e)
	}
	ds.exact = nil
	ds.set(fp)
}

// Has reports whether an event of fingerprint fp was taken: exactly, or,
// past digestExact events, as the filter says (never false for one it
// took).
func (ds *Digests) Has(fp uint64) bool {
	if ds.filter == nil {
		_, found := slices.BinarySearch(ds.exact, fp)
		return found
	}
	m := uint64(len(ds.filter)) * 8
	h1, h2 := fp>>32, fp&0xffffffff|1
	for i := range uint64(digestHashes) {
		b := (h1 + i*h2) % m
		if ds.filter[b/8]&(1<<(b%8)) == 0 {
			return false
		}
	}
	return true
}

// set sets fp's bits in the filter.
func (ds *Digests) set(fp uint64) {
	m := uint64(len(ds.filter)) * 8
	h1, h2 := fp>>32, fp&0xffffffff|1
	for i := range uint64(digestHashes) {
		b := (h1 + i*h2) % m
		ds.filter[b/8] |= 1 << (b % 8)
	}
}

// digestsJSON is the stored form of Digests: the count, and either the
// exact fingerprints (8 bytes each, big-endian, sorted) or the filter;
// encoding/json writes both as base64.
type digestsJSON struct {
	N      uint64 `json:"n"`
	Exact  []byte `json:"exact,omitempty"`
	Filter []byte `json:"filter,omitempty"`
}

// MarshalJSON writes the stored form.
func (ds *Digests) MarshalJSON() ([]byte, error) {
	w := digestsJSON{N: ds.n, Filter: ds.filter}
	if ds.filter == nil && len(ds.exact) > 0 {
		w.Exact = make([]byte, 0, 8*len(ds.exact))
		for _, fp := range ds.exact {
			w.Exact = binary.BigEndian.AppendUint64(w.Exact, fp)
		}
	}
	return json.Marshal(w)
}

// errDigests marks a stored form that MarshalJSON did not write.
var errDigests = errors.New("run state: digests")

// UnmarshalJSON reads the stored form.
func (ds *Digests) UnmarshalJSON(b []byte) error {
	var w digestsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %w", errDigests, err)
	}
	switch {
	case w.Filter != nil && (len(w.Exact) > 0 || len(w.Filter) < 64 || bits.OnesCount(uint(len(w.Filter))) != 1):
		return fmt.Errorf("%w: a filter of %d bytes", errDigests, len(w.Filter))
	case len(w.Exact)%8 != 0 || len(w.Exact)/8 > digestExact || uint64(len(w.Exact)/8) > w.N:
		return fmt.Errorf("%w: %d bytes of exact fingerprints for %d events", errDigests, len(w.Exact), w.N)
	}
	*ds = Digests{n: w.N, filter: w.Filter}
	if w.Filter == nil {
		ds.exact = make([]uint64, 0, len(w.Exact)/8)
		for i := 0; i < len(w.Exact); i += 8 {
			ds.exact = append(ds.exact, binary.BigEndian.Uint64(w.Exact[i:]))
		}
		if !slices.IsSorted(ds.exact) {
			return fmt.Errorf("%w: exact fingerprints out of order", errDigests)
		}
	}
	return nil
}
