package regress_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/gttsplit/gttsplit/internal/regress"
)

// benchLane is one lane's runs at builds builds, perBuild runs each, the
// packed copy dropping to none and coming back every tenth build, in
// arrival order (the builds shuffled by a stride).
func benchLane(builds, perBuild int) []regress.Run {
	var runs []regress.Run
	for i := range builds {
		n := 9000 + (i*37)%builds // every build once, out of order
		packed, peak := 795.8, 3925.0
		if (n/10)%2 == 1 {
			packed, peak = 0, 3129.2
		}
		for j := range perBuild {
			id := "r" + strconv.Itoa(n) + "-" + strconv.Itoa(j)
			started := fmt.Sprintf("2026-%02d-%02dT%02d:00:00Z", 1+n%12, 1+n%28, j%24)
			r := buildRun(id, n, strconv.Itoa(n%10), started, peak+float64(j), packed)
			runs = append(runs, r)
		}
	}
	return runs
}

// BenchmarkLaneChanges is what the owner of a lane's partition does when
// a run of the lane closes: the lane's changes over its runs
// (NewChanges) and its comment's body (Markdown), against the history
// /trend draws of the same runs (NewHistory), the baseline.
//
//	go test ./internal/regress -run '^$' -bench LaneChanges
func BenchmarkLaneChanges(b *testing.B) {
	th := regress.DefaultThresholds()
	for _, size := range []struct{ builds, perBuild int }{{50, 2}, {200, 5}} {
		runs := benchLane(size.builds, size.perBuild)
		name := fmt.Sprintf("runs=%d", len(runs))
		b.Run(name+"/history", func(b *testing.B) {
			for b.Loop() {
				in := append([]regress.Run(nil), runs...)
				if h := regress.NewHistory(in, regress.Filter{}, 5); len(h.Groups) != 1 {
					b.Fatal(len(h.Groups))
				}
			}
		})
		b.Run(name+"/changes", func(b *testing.B) {
			for b.Loop() {
				in := append([]regress.Run(nil), runs...)
				c := regress.NewChanges(in, regress.Filter{}, th)
				if len(c.Lanes) != 1 || len(c.Lanes[0].Changes) == 0 {
					b.Fatal("no change")
				}
				l := c.Lanes[0]
				lc := regress.LaneComment{Host: l.Host, Lane: l.Lane, Model: l.Model, Changes: l.Changes}
				if lc.Markdown(th, "https://gtt.example.org") == "" {
					b.Fatal("no body")
				}
			}
		})
	}
}
