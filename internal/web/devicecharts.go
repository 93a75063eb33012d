package web

import (
	"fmt"
	"math"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

// DeviceChart is a bar per card with devices (and per device matched to
// no card) of the report's device table, on one MiB scale: each card's own
// memory at its peak split among its devices' model, packed, KV + state
// and compute rows and what is not attributed (present.DeviceBars).
type DeviceChart struct {
	Width, Height float64
	Left, Right   float64
	BarHeight     float64
	Bars          []DeviceChartBar
	Ticks         []Tick
	AxisY         float64
}

// DeviceChartBar is one bar of a DeviceChart: its label above it, its
// segments, and the total at its end.
type DeviceChartBar struct {
	Label    string
	Y        float64
	TotalMiB float64
	Measured bool // the total is a card's measured peak
	Segments []Segment
}

const devRowH = 50.0

// NewDeviceChart lays out the device bars of r in both layouts; nil
// charts when r has no device table.
func NewDeviceChart(r split.Report) Charts[DeviceChart] {
	return Charts[DeviceChart]{newDeviceChart(r, wideBars), newDeviceChart(r, narrowBars)}
}

func newDeviceChart(r split.Report, g barGeom) *DeviceChart {
	bars := present.DeviceBars(r)
	if len(bars) == 0 {
		return nil
	}
	maxT := 0.0
	for _, b := range bars {
		maxT = math.Max(maxT, b.Total)
	}
	if maxT <= 0 {
		return nil
	}
	ticks, top := niceTicks(maxT, g.ticks)
	scale := (g.right - g.left) / top
	c := &DeviceChart{Width: g.w, Left: g.left, Right: g.right, BarHeight: 22}
	y := 22.0
	for _, b := range bars {
		bar := DeviceChartBar{Label: b.Label, Y: y, TotalMiB: b.Total, Measured: b.Measured}
		x := g.left
		for _, p := range b.Parts {
			w := r1(p.MiB * scale)
			share := 0.0
			if b.Total > 0 {
				share = p.MiB / b.Total * 100
			}
			bar.Segments = append(bar.Segments, Segment{Key: p.Key, Label: p.Label, MiB: p.MiB, X: x, W: w, Share: share, Unknown: p.Unknown})
			x = r1(x + w)
		}
		c.Bars = append(c.Bars, bar)
		y += devRowH
	}
	c.AxisY = y - devRowH + c.BarHeight + 6
	for _, t := range ticks {
		c.Ticks = append(c.Ticks, Tick{Pos: r1(g.left + t*scale), Label: fmt.Sprintf("%g", t)})
	}
	c.Height = c.AxisY + 40
	return c
}
