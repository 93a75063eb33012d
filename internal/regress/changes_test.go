package regress_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// buildRun is a complete run of the 4B lane at build n (commit c,
// 40 hex digits made of c), started at the given time, with the bundled
// run's figures but the packed copy and the peak given; the duplicate
// follows the packed copy.
func buildRun(id string, n int, c, started string, peak, packed float64) regress.Run {
	r := laneRun(id, "b"+strconv.Itoa(n)+" ("+strings.Repeat(c, 9)[:9]+")", started, peak, packed)
	r.F.Commit = strings.Repeat(c, 40)[:40]
	r.F.DuplicatePct = mib(float64(int(packed/2375.91*10000+0.5)) / 100)
	r.F.UnattributedPct = mib(17.17)
	r.F.Issue = "example/engine#856"
	return r
}

// theLane is the 4B lane's story: the packed copy from b9800 to b9866,
// gone at b9901 (the peak down by as much), back at b9950; b9880 moves
// the peak by 60 MiB and the compute buffer by 0.5 MiB, under their
// thresholds.
func theLane() []regress.Run {
	b9880 := buildRun("r9880", 9880, "3", "2026-11-08T10:00:00Z", 3985, 795.8)
	b9880.F.ComputeMiB = mib(43.71)
	return []regress.Run{
		buildRun("r9800", 9800, "1", "2026-11-05T10:00:00Z", 3925, 795.8),
		buildRun("r9866", 9866, "2", "2026-11-07T14:03:09Z", 3925, 795.8),
		b9880,
		buildRun("r9901", 9901, "4", "2026-11-09T10:00:00Z", 3189.2, 0),
		buildRun("r9920", 9920, "5", "2026-11-10T10:00:00Z", 3189.2, 0),
		buildRun("r9950", 9950, "6", "2026-11-11T10:00:00Z", 3985, 795.8),
	}
}

func changeNames(l regress.Lane) []string {
	var out []string
	for _, c := range l.Changes {
		var rows []string
		for _, r := range c.Rows {
			rows = append(rows, r.Row)
		}
		out = append(out, c.Before.Name()+"→"+c.After.Name()+":"+strings.Join(rows, ","))
	}
	return out
}

// A lane's changes are between consecutive builds, newest first, and only
// rows beyond their thresholds: the packed copy's drop to none and its
// return (with the peak and the duplicate), not b9880's 60 MiB peak (+1.5
// %) nor its 0.5 MiB compute buffer.
func TestLaneChanges(t *testing.T) {
	c := regress.NewChanges(theLane(), regress.Filter{}, regress.DefaultThresholds())
	require.Equal(t, regress.ChangesSchema, c.Schema)
	require.Len(t, c.Lanes, 1)
	l := c.Lanes[0]
	require.Equal(t, 6, l.Builds)
	require.Equal(t, []string{"b9920→b9950:peak,packed,duplicate", "b9880→b9901:peak,packed,duplicate"}, changeNames(l))
	drop := l.Changes[1]
	require.Equal(t, "r9880", drop.Before.RunID)
	require.Equal(t, "r9901", drop.After.RunID)
	require.Equal(t, strings.Repeat("3", 40)+".."+strings.Repeat("4", 40), drop.Range)
	require.Equal(t, "example/engine#856", drop.Issue)
	packed := drop.Rows[1]
	require.Equal(t, regress.RowChange{Row: "packed", Unit: split.UnitMiB, Before: 795.8, After: 0, Diff: -795.8, Pct: packed.Pct}, packed)
	require.InDelta(t, -100, float64(*packed.Pct), 1e-9)
	back := l.Changes[0]
	require.True(t, back.Rows[1].FromZero)
	require.Nil(t, back.Rows[1].Pct)

	// Under the history's 5 % and thresholds of 30 MiB, b9880 is a change.
	th, err := regress.ParseThresholds("peak=30/1,compute=0.25")
	require.NoError(t, err)
	l = regress.NewChanges(theLane(), regress.Filter{}, th).Lanes[0]
	require.Equal(t, []string{"b9920→b9950:peak,packed,duplicate", "b9880→b9901:peak,packed,compute,duplicate", "b9866→b9880:peak,compute"}, changeNames(l))
}

// The order is the builds', never the runs' arrival: the same runs in any
// order give the same changes, and an old build replayed late falls in
// its place (b9866 given last, after b9950, does not read as the packed
// copy coming back after b9950).
func TestLaneChangesOrderIsTheBuilds(t *testing.T) {
	want := regress.NewChanges(theLane(), regress.Filter{}, regress.DefaultThresholds())
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		runs := theLane()
		rnd.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
		require.Equal(t, want, regress.NewChanges(runs, regress.Filter{}, regress.DefaultThresholds()))
	}
	// Without b9901 and b9920, then replayed late: the drop is found
	// between the right builds, and the newest change stays b9950's.
	runs := slices.DeleteFunc(theLane(), func(r regress.Run) bool { return r.ID == "r9901" || r.ID == "r9920" })
	l := regress.NewChanges(runs, regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	require.Empty(t, changeNames(l), "b9880 → b9950: nothing moved")
	runs = append(runs, buildRun("r9901", 9901, "4", "2026-11-12T10:00:00Z", 3189.2, 0))
	l = regress.NewChanges(runs, regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	require.Equal(t, []string{"b9901→b9950:peak,packed,duplicate", "b9880→b9901:peak,packed,duplicate"}, changeNames(l))
}

// A build is measured by its complete run started last; incomplete runs
// and runs of no build number are left out; two commits of one build
// number are ordered by the commits' times, not by when they ran; a build
// line's short commit is the source tree's full one.
func TestLaneChangesBuilds(t *testing.T) {
	runs := []regress.Run{
		buildRun("a", 9800, "1", "2026-11-05T10:00:00Z", 3925, 795.8),
		buildRun("b-old", 9801, "2", "2026-11-06T10:00:00Z", 3925, 795.8),
		buildRun("b-new", 9801, "2", "2026-11-06T12:00:00Z", 3189.2, 0), // the build's latest run
		buildRun("c", 9802, "3", "2026-11-07T10:00:00Z", 3189.2, 0),
	}
	short := buildRun("b-short", 9801, "2", "2026-11-06T11:00:00Z", 3925, 795.8)
	short.F.Commit = split.BuildCommit(short.F.Build) // 9 characters of the same commit
	incomplete := buildRun("c-cut", 9802, "3", "2026-11-07T12:00:00Z", 3925, 795.8)
	incomplete.F.Complete = false
	unknown := buildRun("u", 0, "9", "2026-11-08T10:00:00Z", 3925, 795.8)
	unknown.F.Build = ""
	runs = append(runs, short, incomplete, unknown)
	l := regress.NewChanges(runs, regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	require.Equal(t, 3, l.Builds)
	require.Equal(t, 2, l.Skipped)
	require.Equal(t, []string{"b9800→b9801:peak,packed,duplicate"}, changeNames(l))
	require.Equal(t, "b-new", l.Changes[0].After.RunID)
	require.Equal(t, 3, l.Changes[0].After.Runs)
	require.Len(t, l.Changes[0].After.Commit, 40)

	// Two commits of b9801: the one committed later is the later build,
	// though it was measured first.
	x := buildRun("x", 9801, "7", "2026-11-06T09:00:00Z", 3189.2, 0)
	x.F.CommitTime = "2026-11-04T12:00:00Z"
	y := buildRun("y", 9801, "8", "2026-11-06T08:00:00Z", 3925, 795.8)
	y.F.CommitTime = "2026-11-04T11:00:00Z"
	a := buildRun("a", 9800, "1", "2026-11-05T10:00:00Z", 3925, 795.8)
	l = regress.NewChanges([]regress.Run{x, y, a}, regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	require.Equal(t, []string{"b9801→b9801:peak,packed,duplicate"}, changeNames(l))
	require.Equal(t, "y", l.Changes[0].Before.RunID)
	require.Equal(t, "x", l.Changes[0].After.RunID)
	require.Equal(t, strings.Repeat("8", 40)+".."+strings.Repeat("7", 40), l.Changes[0].Range)
}

// Controls are a lane of their own: a control's drop is not the lane's,
// and the lane's runs are not compared with its controls.
func TestLaneChangesControlsApart(t *testing.T) {
	runs := theLane()[:2]
	ctl := buildRun("ctl", 9866, "2", "2026-11-07T15:00:00Z", 753.3, 0)
	ctl.F.ControlOf = "r9866"
	ctl2 := buildRun("ctl2", 9901, "4", "2026-11-09T11:00:00Z", 1200, 0)
	ctl2.F.ControlOf = "r9901"
	c := regress.NewChanges(append(runs, ctl, ctl2), regress.Filter{}, regress.DefaultThresholds())
	require.Len(t, c.Lanes, 2)
	require.False(t, c.Lanes[0].Control)
	require.Empty(t, c.Lanes[0].Changes)
	require.True(t, c.Lanes[1].Control)
	require.Equal(t, []string{"b9866→b9901:peak"}, changeNames(c.Lanes[1]))
}

// Thresholds are read over the defaults; a row named off is not watched;
// what they print reads back the same.
func TestParseThresholds(t *testing.T) {
	def := regress.DefaultThresholds()
	require.Equal(t, "peak=128/5,model=1/1,packed=1/1,state=1/1,compute=1/1,unattributed=128/10,duplicate=1/0", def.String())
	require.Equal(t, split.Threshold{Abs: 128, Pct: 5}, def["peak"])
	_, watched := def["final"]
	require.False(t, watched, "the final sample depends on when the process ended")

	th, err := regress.ParseThresholds(" peak=256MiB/10% , final=64/5, unattributed=off, duplicate=2%")
	require.NoError(t, err)
	require.Equal(t, "peak=256/10,final=64/5,model=1/1,packed=1/1,state=1/1,compute=1/1,unattributed=off,duplicate=2/0", th.String())
	back, err := regress.ParseThresholds(th.String())
	require.NoError(t, err)
	require.Equal(t, th, back)
	require.Equal(t, "peak > 256 MiB and > 10 %, final > 64 MiB and > 5 %, model buffer > 1 MiB and > 1 %, packed > 1 MiB and > 1 %, KV + state > 1 MiB and > 1 %, compute > 1 MiB and > 1 %, duplicate > 2 points", th.Text())

	for in, msg := range map[string]string{
		"peak":          `"peak": not ROW=ABS/PCT with ROW one of peak, final, model, packed, state, compute, unattributed, duplicate, unattributed_share`,
		"host=1":        `"host=1": not ROW=ABS/PCT`,
		"peak=big":      `peak: ABS "big" is not a number`,
		"peak=1/x":      `peak: PCT "x" is not a percentage`,
		"peak=-1":       `peak: ABS "-1" is not a number`,
		"packed=0/0":    `packed: a threshold of 0/0 marks every change: give one, or packed=off`,
		"packed=1/5,x=": `"x=": not ROW=ABS/PCT`,
	} {
		_, err := regress.ParseThresholds(in)
		require.ErrorContains(t, err, msg, in)
	}
	require.Error(t, regress.Config{Thresholds: "peak"}.Validate())
	require.ErrorContains(t, regress.Config{PageURL: "ftp://x"}.Validate(), "page_url")
	require.NoError(t, regress.DefaultConfig().Validate())
}

// Carry keeps the changes posted before whose runs left the store: those
// up to the lane's oldest build now; the rest are the runs' to say.
func TestCarry(t *testing.T) {
	all := regress.NewChanges(theLane(), regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	// b9800 to b9901 left the store (retention): the drop is no longer
	// between two runs of it.
	now := regress.NewChanges(theLane()[4:], regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	require.Equal(t, []string{"b9920→b9950:peak,packed,duplicate"}, changeNames(now))
	now.Changes = regress.Carry(all.Changes, now)
	require.Equal(t, changeNames(all), changeNames(now))
	// A change the runs still show is theirs: not twice.
	again := regress.NewChanges(theLane(), regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	require.Equal(t, changeNames(all), changeNames(regress.Lane{Changes: regress.Carry(all.Changes, again)}))
	// A recorded change after the oldest build is dropped when the runs
	// no longer show it (a build replayed late split it in two).
	stale := all.Changes[0]
	stale.Before.RunID, stale.Before.Number = "gone", 9930
	got := regress.Carry([]regress.LaneChange{stale}, again)
	require.Equal(t, changeNames(all), changeNames(regress.Lane{Changes: got}))
}

// The text names the builds, the commits to bisect, the rows before →
// after and the two runs; the JSON carries the full commits.
func TestChangesRendered(t *testing.T) {
	c := regress.NewChanges(theLane(), regress.Filter{}, regress.DefaultThresholds())
	txt := regress.ChangesText(c)
	require.Contains(t, txt, "strix01 gpu0 Qwen3.5-4B-Q4_K_M.gguf: 2 changes over 6 builds, the newest first\n")
	require.Contains(t, txt, "b9880 → b9901  bisect 333333333..444444444\n")
	require.Contains(t, txt, "b9880 → b9901  bisect 333333333..444444444\n"+
		"  peak       3985.0  →  3189.2    -795.8 MiB   -20.0 %\n"+
		"  packed      795.8  →     0.0    -795.8 MiB  -100.0 %\n"+
		"  duplicate  33.5 %  →   0.0 %  -33.5 points\n")
	require.Contains(t, txt, "  runs r9880 → r9901\n")
	require.True(t, strings.HasSuffix(txt, "\nthresholds: peak > 128 MiB and > 5 %, model buffer > 1 MiB and > 1 %, packed > 1 MiB and > 1 %, KV + state > 1 MiB and > 1 %, compute > 1 MiB and > 1 %, not attributed > 128 MiB and > 10 %, duplicate > 1 point"), txt)

	md := regress.ChangesMarkdown(c)
	require.Contains(t, md, "| b9880 → b9901 | `333333333..444444444` | peak | 3985.0 | 3189.2 | -795.8 MiB (-20.0 %) |\n|  |  | packed | 795.8 | 0.0 | -795.8 MiB (-100.0 %) |\n")

	b, err := regress.ChangesJSON(c)
	require.NoError(t, err)
	var back struct {
		Schema     string                     `json:"schema"`
		Thresholds map[string]split.Threshold `json:"thresholds"`
		Lanes      []struct {
			Changes []struct {
				Range  string `json:"range"`
				Before struct {
					RunID  string `json:"run_id"`
					Number int64  `json:"build_number"`
				} `json:"before"`
				Rows []map[string]any `json:"rows"`
			} `json:"changes"`
		} `json:"lanes"`
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, split.Threshold{Abs: 128, Pct: 5}, back.Thresholds["peak"])
	require.Equal(t, strings.Repeat("3", 40)+".."+strings.Repeat("4", 40), back.Lanes[0].Changes[1].Range)
	require.Equal(t, int64(9880), back.Lanes[0].Changes[1].Before.Number)
	require.Equal(t, map[string]any{"row": "packed", "unit": "MiB", "before": 795.8, "after": 0.0, "diff": -795.8, "pct": -100.0}, back.Lanes[0].Changes[1].Rows[1])
}

// The lane's comment: each change with its builds, the commits to bisect,
// the rows before → after, links to both runs and their comparison on
// the page (or the commands without one); names from the network stay
// inside code spans.
func TestLaneCommentMarkdown(t *testing.T) {
	l := regress.NewChanges(theLane(), regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	lc := regress.LaneComment{Host: "strix01", Lane: "gpu0", Model: "Qwen3.5-4B-Q4_K_M.gguf", Changes: l.Changes}
	md := lc.Markdown(regress.DefaultThresholds(), "https://gtt.example.org/")
	require.True(t, strings.HasPrefix(md, "### gttsplit: lane changes of `strix01` `gpu0` `Qwen3.5-4B-Q4_K_M.gguf`\n"), md)
	first, second := strings.Index(md, "**b9920 → b9950**"), strings.Index(md, "**b9880 → b9901**")
	require.True(t, first > 0 && second > first, "newest first:\n%s", md)
	require.Contains(t, md, "**b9880 → b9901** · bisect `333333333..444444444`\n\n| row | b9880 | b9901 | change |\n|---|---:|---:|---:|\n| peak | 3985.0 | 3189.2 | -795.8 MiB (-20.0 %) |\n| packed | 795.8 | 0.0 | -795.8 MiB (-100.0 %) |\n")
	require.Contains(t, md, "Runs [`r9880`](https://gtt.example.org/run/r9880) → [`r9901`](https://gtt.example.org/run/r9901) · [their comparison](https://gtt.example.org/compare?a=r9880&b=r9901)\n")

	md = lc.Markdown(regress.DefaultThresholds(), "")
	require.Contains(t, md, "Runs `r9880` → `r9901`; their comparison: `aggregator compare r9880 r9901`\n")

	hostile := regress.LaneComment{Host: "h`x", Lane: "l\n# heading", Model: "m'o del.gguf"}
	md = hostile.Markdown(regress.DefaultThresholds(), "")
	require.Contains(t, md, "lane changes of `h'x` `l # heading` `m'o del.gguf`\n")
	require.Contains(t, md, "No change beyond the thresholds")

	// Many changes: the newest MaxCommentChanges, and how to list the rest.
	var many []regress.LaneChange
	for range regress.MaxCommentChanges + 3 {
		many = append(many, l.Changes[0])
	}
	md = regress.LaneComment{Host: "h", Lane: "l", Model: "m o", Changes: many}.Markdown(regress.DefaultThresholds(), "")
	require.Equal(t, regress.MaxCommentChanges, strings.Count(md, "**b9920 → b9950**"))
	require.Contains(t, md, "*3 older changes not shown: `aggregator history --changes --host h --lane l --model 'm o'`.*")
}
