package perftest

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pairs holds the times of a benchmark's code and of its baseline, run in
// alternation on the same input (one pair a round), for their ratio.
type Pairs struct {
	ours, base []time.Duration
}

// Add records one round: the benchmark's code took ours, the baseline base.
func (p *Pairs) Add(ours, base time.Duration) {
	p.ours = append(p.ours, ours)
	p.base = append(p.base, base)
}

// Report reports x/baseline, the baseline's summed time over ours (≥ 1:
// ours is as fast as the baseline), and median-x/baseline, the median over
// the rounds of the same ratio (a burst of other load on the machine slows
// one round, not the median; but neither does a garbage collection that
// ours caused, which the sum counts).
func (p *Pairs) Report(b *testing.B) {
	if len(p.ours) == 0 {
		return
	}
	r := make([]float64, len(p.ours))
	var ours, base time.Duration
	for i := range p.ours {
		r[i] = float64(p.base[i]) / float64(max(p.ours[i], 1))
		ours += p.ours[i]
		base += p.base[i]
	}
	slices.Sort(r)
	med := r[len(r)/2]
	if len(r)%2 == 0 {
		med = (r[len(r)/2-1] + med) / 2
	}
	b.ReportMetric(float64(base)/float64(max(ours, 1)), "x/baseline")
	b.ReportMetric(med, "median-x/baseline")
}

// Totals returns the summed times of the benchmark's code and of the
// baseline.
func (p *Pairs) Totals() (ours, base time.Duration) {
	for i := range p.ours {
		ours += p.ours[i]
		base += p.base[i]
	}
	return ours, base
}

// ProcessCPU is the CPU time (user and system) this process used so far,
// an embedded server's included.
func ProcessCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Load1 is the machine's load average over the last minute
// (/proc/loadavg), to give beside a figure; 0 where it cannot be read.
func Load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
