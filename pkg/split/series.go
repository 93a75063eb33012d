package split

import (
	"sort"
	"strconv"
	"time"
)

// The GTT timeline: a bounded, downsampled series of the process's GTT per
// run, and the model-load and context markers of its log. Like the rest of
// the fold it is a function of the set of samples and lines applied
// (order- and duplicate-free), and bounded however long the run is.
const (
	// SeriesMaxBuckets bounds the time buckets of the series. Each keeps
	// its smallest and its largest sample, so a timeline has at most
	// 2 × SeriesMaxBuckets = 1000 points.
	SeriesMaxBuckets = 500
	// seriesBase is the narrowest bucket; a bucket is seriesBase << Shift
	// wide, the smallest such width that needs at most SeriesMaxBuckets.
	seriesBase = int64(time.Millisecond)
	// MaxMarkers bounds the load and context markers kept (the latest by
	// position, as the rules measure the last load).
	MaxMarkers = 64
)

// Marker kinds of a timeline.
const (
	MarkerModelLoad = "model_load"
	MarkerContext   = "context"
)

// seriesState is the downsampled series: buckets of absolute time (unix
// nanoseconds / width, so every order of the same samples buckets them
// alike), each with its min and max sample.
type seriesState struct {
	Shift   uint8    `json:"shift,omitempty"`
	Buckets []bucket `json:"buckets,omitempty"`
}

type bucket struct {
	I   int64       `json:"i"`
	Min seriesPoint `json:"min"`
	Max seriesPoint `json:"max"`
}

// seriesPoint is one sample: time (unix ns), tick seq, process GTT bytes.
type seriesPoint struct {
	T   int64  `json:"t"`
	Seq uint64 `json:"s"`
	B   int64  `json:"b"`
}

func (p seriesPoint) earlier(q seriesPoint) bool {
	if p.T != q.T {
		return p.T < q.T
	}
	return p.Seq < q.Seq
}

// lowerThan orders minima: smaller bytes, then earlier.
func (p seriesPoint) lowerThan(q seriesPoint) bool {
	return p.B < q.B || p.B == q.B && p.earlier(q)
}

// higherThan orders maxima: larger bytes, then earlier.
func (p seriesPoint) higherThan(q seriesPoint) bool {
	return p.B > q.B || p.B == q.B && p.earlier(q)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (s *seriesState) width() int64 { return seriesBase << s.Shift }

// add puts one sample into the series.
func (s *seriesState) add(p seriesPoint) {
	s.put(bucket{I: floorDiv(p.T, s.width()), Min: p, Max: p})
	for len(s.Buckets) > SeriesMaxBuckets && s.Shift < 62 {
		s.Shift++
		old := s.Buckets
		s.Buckets = make([]bucket, 0, len(old)/2+1)
		for _, b := range old {
			b.I = floorDiv(b.I, 2)
			s.put(b)
		}
	}
}

// put merges b into the bucket of its index (the buckets stay sorted).
func (s *seriesState) put(b bucket) {
	i := sort.Search(len(s.Buckets), func(i int) bool { return s.Buckets[i].I >= b.I })
	if i < len(s.Buckets) && s.Buckets[i].I == b.I {
		x := &s.Buckets[i]
		if b.Min.lowerThan(x.Min) {
			x.Min = b.Min
		}
		if b.Max.higherThan(x.Max) {
			x.Max = b.Max
		}
		return
	}
	s.Buckets = append(s.Buckets, bucket{})
	copy(s.Buckets[i+1:], s.Buckets[i:])
	s.Buckets[i] = b
}

// marker is a model-load or context line of the log, with its capture
// time when the line had one (unix ns; 0: unknown).
type marker struct {
	Kind   string `json:"k"`
	Seq    uint64 `json:"s"`
	Stream string `json:"st,omitempty"`
	T      int64  `json:"t,omitempty"`
}

// addMarker keeps a load or context line, at most MaxMarkers (the latest
// by position).
func (st *state) addMarker(m marker) {
	i := sort.Search(len(st.Markers), func(i int) bool {
		x := st.Markers[i]
		return !posLess(x.Seq, x.Stream, m.Seq, m.Stream)
	})
	if i < len(st.Markers) && st.Markers[i].Seq == m.Seq && st.Markers[i].Stream == m.Stream {
		return
	}
	if len(st.Markers) >= MaxMarkers {
		// Full: the first goes. Moving the rest down (a few KiB) keeps
		// the one array, where dropping the head would make append
		// allocate a new one every few markers.
		if i == 0 {
			return // the first to go is this one
		}
		i--
		copy(st.Markers[:i], st.Markers[1:i+1])
		st.Markers[i] = m
		return
	}
	st.Markers = append(st.Markers, marker{})
	copy(st.Markers[i+1:], st.Markers[i:])
	st.Markers[i] = m
}

// Millis is a duration in milliseconds, marshalled with two decimals.
type Millis float64

// MarshalJSON writes the value rounded to two decimals.
func (m Millis) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, round2(float64(m)), 'f', -1, 64), nil
}

// Timeline is the process GTT over the run, downsampled (the smallest and
// largest sample of each time bucket, at most 1000 points), with the
// model-load and context markers of the log. Times are milliseconds since
// Start: the first sample's time, or the first marker's when earlier.
type Timeline struct {
	Start    string           `json:"start"`
	BucketMS Millis           `json:"bucket_ms"`
	Points   []TimelinePoint  `json:"points"`
	Markers  []TimelineMarker `json:"markers"`
	// PeakMS and FinalMS place the peak and the final sample (null when
	// they have no time).
	PeakMS  *Millis `json:"peak_t_ms"`
	FinalMS *Millis `json:"final_t_ms"`
}

// TimelinePoint is one sample of the timeline.
type TimelinePoint struct {
	TMS Millis `json:"t_ms"`
	MiB MiB    `json:"mib"`
}

// TimelineMarker is a model-load or context line of the log; TMS is null
// when the line's capture time is unknown (a saved log).
type TimelineMarker struct {
	Kind string  `json:"kind"`
	Line uint64  `json:"line"`
	TMS  *Millis `json:"t_ms"`
}

// timeline renders the series; nil when no sample had a time.
func (st *state) timeline() *Timeline {
	s := &st.Ticks.Series
	if len(s.Buckets) == 0 {
		return nil
	}
	var pts []seriesPoint
	for _, b := range s.Buckets {
		pts = append(pts, b.Min)
		if b.Max != b.Min {
			pts = append(pts, b.Max)
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].earlier(pts[j]) })
	t0 := pts[0].T
	for _, m := range st.Markers {
		if m.T != 0 && m.T < t0 {
			t0 = m.T
		}
	}
	ms := func(t int64) Millis { return Millis(float64(t-t0) / float64(time.Millisecond)) }
	tl := &Timeline{
		Start:    time.Unix(0, t0).UTC().Format(time.RFC3339Nano),
		BucketMS: Millis(float64(s.width()) / float64(time.Millisecond)),
		Points:   make([]TimelinePoint, len(pts)),
		Markers:  []TimelineMarker{},
	}
	for i, p := range pts {
		tl.Points[i] = TimelinePoint{TMS: ms(p.T), MiB: MiB(float64(p.B) / bytesPerMiB)}
	}
	for _, m := range st.Markers {
		x := TimelineMarker{Kind: m.Kind, Line: m.Seq}
		if m.T != 0 {
			v := ms(m.T)
			x.TMS = &v
		}
		tl.Markers = append(tl.Markers, x)
	}
	at := func(t *tick) *Millis {
		if t == nil || t.Time.IsZero() {
			return nil
		}
		v := ms(t.Time.UnixNano())
		return &v
	}
	tl.PeakMS, tl.FinalMS = at(st.Ticks.Peak), at(st.Ticks.Final)
	return tl
}
