package split

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// amdgpuSample is one tick with one amdgpu client holding mib MiB of GTT.
func amdgpuSample(seq uint64, t time.Time, mib int) Sample {
	text := "drm-driver:\tamdgpu\ndrm-client-id:\t7\ndrm-pdev:\t0000:c5:00.0\ndrm-total-gtt:\t" + itoa(mib) + " MiB\n"
	return Sample{Seq: seq, Time: t, Procs: []ProcFDs{{PID: 1, FDs: []FDInfo{{FD: 4, Text: text}}}}}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A week sampled every 100 ms stays at most 1000 points, keeps the peak
// and the trough, and does not depend on the order the samples came in.
func TestSeriesBoundedOrderFree(t *testing.T) {
	t0 := time.Date(2026, 11, 7, 14, 0, 0, 0, time.UTC)
	const n = 20000 // 100 ms apart: 2000 s
	var ss []Sample
	for i := range n {
		mib := 1000 + i%97
		switch i {
		case 12345:
			mib = 5000 // the peak
		case 777:
			mib = 10 // the trough
		}
		ss = append(ss, amdgpuSample(uint64(i+1), t0.Add(time.Duration(i)*100*time.Millisecond), mib))
	}
	fold := func(order []Sample) *Timeline {
		f := NewFold(Options{})
		for _, s := range order {
			f.AddSample(s)
		}
		f.AddSample(order[0]) // a duplicate changes nothing
		return f.Report().Timeline
	}
	a := fold(ss)
	shuffled := append([]Sample(nil), ss...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b := fold(shuffled)
	require.Equal(t, a, b)
	require.LessOrEqual(t, len(a.Points), 2*SeriesMaxBuckets)
	require.Greater(t, len(a.Points), SeriesMaxBuckets/2)
	var hi, lo MiB = 0, 1e9
	for i, p := range a.Points {
		hi, lo = max(hi, p.MiB), min(lo, p.MiB)
		if i > 0 {
			require.GreaterOrEqual(t, p.TMS, a.Points[i-1].TMS)
		}
	}
	require.Equal(t, MiB(5000), hi)
	require.Equal(t, MiB(10), lo)
	require.NotNil(t, a.PeakMS)
	require.InDelta(t, 1234500, float64(*a.PeakMS), 0.01)
	require.InDelta(t, float64(n-1)*100, float64(*a.FinalMS), 0.01)
	// 2000 s in ≤ 500 buckets: 4.096 s wide (1 ms << 12).
	require.Equal(t, Millis(4096), a.BucketMS)

	// The state round-trips and stays small.
	f := NewFold(Options{})
	for _, s := range ss {
		f.AddSample(s)
	}
	st, err := json.Marshal(f)
	require.NoError(t, err)
	require.Less(t, len(st), 120_000)
	g := NewFold(Options{})
	require.NoError(t, json.Unmarshal(st, g))
	require.Equal(t, a, g.Report().Timeline)
}

// A short run keeps every sample; markers carry the line's capture time.
func TestTimelineMarkers(t *testing.T) {
	t0 := time.Date(2026, 11, 7, 14, 0, 0, 0, time.UTC)
	f := NewFold(Options{})
	f.AddLine(Line{Stream: "stderr", Seq: 3, Text: "llama_model_loader: loaded meta data with 40 key-value pairs and 400 tensors from x.gguf (version GGUF V3 (latest))", Time: t0.Add(50 * time.Millisecond)})
	f.AddLine(Line{Stream: "stderr", Seq: 9, Text: "llama_context: constructing llama_context", Time: t0.Add(350 * time.Millisecond)})
	f.AddLine(Line{Stream: "stderr", Seq: 9, Text: "llama_context: constructing llama_context", Time: t0.Add(350 * time.Millisecond)})
	for i, mib := range []int{100, 900, 2000, 1900} {
		f.AddSample(amdgpuSample(uint64(i+1), t0.Add(time.Duration(100+100*i)*time.Millisecond), mib))
	}
	tl := f.Report().Timeline
	require.NotNil(t, tl)
	require.Equal(t, "2026-11-07T14:00:00.05Z", tl.Start)
	require.Len(t, tl.Points, 4)
	require.Equal(t, TimelinePoint{TMS: 250, MiB: 2000}, tl.Points[2])
	require.Len(t, tl.Markers, 2)
	require.Equal(t, MarkerModelLoad, tl.Markers[0].Kind)
	require.Equal(t, Millis(0), *tl.Markers[0].TMS)
	require.Equal(t, MarkerContext, tl.Markers[1].Kind)
	require.Equal(t, uint64(9), tl.Markers[1].Line)
	require.Equal(t, Millis(300), *tl.Markers[1].TMS)
	require.Equal(t, Millis(250), *tl.PeakMS)
	require.Equal(t, Millis(350), *tl.FinalMS)

	// Without timed samples there is no timeline.
	require.Nil(t, NewFold(Options{}).Report().Timeline)
}

func TestMarkersBounded(t *testing.T) {
	f := NewFold(Options{})
	for i := range 3 * MaxMarkers {
		f.AddLine(Line{Stream: "log", Seq: uint64(3*MaxMarkers - i), Text: "llama_context: constructing llama_context"})
	}
	require.Len(t, f.st.Markers, MaxMarkers)
	require.Equal(t, uint64(2*MaxMarkers+1), f.st.Markers[0].Seq)
	require.Equal(t, uint64(3*MaxMarkers), f.st.Markers[MaxMarkers-1].Seq)
}
