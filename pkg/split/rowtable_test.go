package split

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every row is whole for the outputs its kind and flags put it in: each
// has the names, labels and glyph those outputs read.
func TestRowsAreWhole(t *testing.T) {
	t.Parallel()
	keys, jsons, gauges := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, row := range Rows {
		require.NotEmpty(t, row.Key)
		require.False(t, keys[row.Key], "key %s twice", row.Key)
		require.False(t, jsons[row.JSON], "JSON key %s twice", row.JSON)
		keys[row.Key], jsons[row.JSON] = true, true
		require.NotEmpty(t, row.Labels.Report, row.Key)
		require.Contains(t, []Unit{UnitMiB, UnitPct}, row.Unit, row.Key)
		require.NotZero(t, row.Kind, row.Key)
		require.NotNil(t, row.report, row.Key)
		if row.Kind == RowShare {
			require.Equal(t, UnitPct, row.Unit, row.Key)
		} else {
			require.Equal(t, UnitMiB, row.Unit, row.Key)
		}
		if row.Kind == RowPart || row.Kind == RowRest {
			require.NotEmpty(t, row.Labels.Bar, "%s: the bars draw it", row.Key)
			require.NotEmpty(t, row.Glyph, "%s: the text bars draw it", row.Key)
		}
		if row.History || row.Growth || row.Trend || row.Gauge != "" {
			require.True(t, row.Kept(), "%s: read from the figures a lane keeps", row.Key)
			require.NotEmpty(t, row.Labels.History, row.Key)
		}
		if row.Growth || row.Trend {
			require.Equal(t, UnitMiB, row.Unit, "%s: a MiB figure", row.Key)
		}
		if row.PerDevice() {
			require.NotEmpty(t, row.Labels.Device, row.Key)
			require.NotEmpty(t, row.Labels.Bar, row.Key)
		}
		if row.PerDevice() || row.PerCard() {
			require.NotEmpty(t, row.DeviceJSON, row.Key)
		}
		if row.Gauge != "" {
			g := string(row.Unit) + " " + row.Gauge
			require.False(t, gauges[g], "gauge %s twice", g)
			gauges[g] = true
		}
	}
	require.Len(t, RowsOf(RowRest), 1, "the bars have one rest")
}

// setByJSON sets the figure of v's field with JSON key key.
func setByJSON(t *testing.T, v any, key string, to MiB) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if strings.Split(rv.Type().Field(i).Tag.Get("json"), ",")[0] == key {
			rv.Field(i).Set(reflect.ValueOf(&to))
			return
		}
	}
	t.Fatalf("%T has no field %s", v, key)
}

// Each row reads the field its JSON key names, in the report, in Figures,
// in a device and in a card: a getter of another field would give
// another figure.
func TestRowsReadTheirKeys(t *testing.T) {
	t.Parallel()
	for i, row := range Rows {
		want := MiB(1000 + i)
		var r Report
		setByJSON(t, &r, row.JSON, want)
		require.Equal(t, want, *row.Of(r), row.Key)
		for _, other := range Rows {
			if other.Key != row.Key && other.JSON != row.JSON {
				require.Nil(t, other.Of(r), "%s reads %s", other.Key, row.JSON)
			}
		}
		if row.Kept() {
			require.Equal(t, want, *row.OfFigures(FiguresOf(r)), row.Key)
			var f Figures
			setByJSON(t, &f, row.JSON, want)
			require.Equal(t, want, *row.OfFigures(f), row.Key)
		}
		if row.PerDevice() {
			var d Device
			setByJSON(t, &d, row.DeviceJSON, want)
			require.Equal(t, want, *row.OfDevice(d), row.Key)
		}
		if row.PerCard() {
			var k Card
			setByJSON(t, &k, row.DeviceJSON, want)
			require.Equal(t, want, *row.OfCard(k), row.Key)
		}
	}
}

// Every figure of a report and of Figures is a row: a new figure cannot
// be left out of the outputs that read Rows.
func TestEveryFigureIsARow(t *testing.T) {
	t.Parallel()
	mibType := reflect.TypeFor[*MiB]()
	for _, v := range []any{Report{}, Figures{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			if f.Type != mibType {
				continue
			}
			key := strings.Split(f.Tag.Get("json"), ",")[0]
			row, ok := rowOfJSON(key)
			require.True(t, ok, "%s.%s (%s) is no row of Rows", rt.Name(), f.Name, key)
			if rt == reflect.TypeFor[Figures]() {
				require.True(t, row.Kept(), "Figures keep %s but its row does not say so", key)
			}
		}
	}
}

func rowOfJSON(key string) (Row, bool) {
	for _, row := range Rows {
		if row.JSON == key {
			return row, true
		}
	}
	return Row{}, false
}

// The docs name every row: the accounting's table its JSON key, the lane
// gauges' table its gauge label.
func TestDocsNameEveryRow(t *testing.T) {
	t.Parallel()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		require.NoError(t, err)
		return string(b)
	}
	acc, ops := read("accounting.md"), read("operations.md")
	rows := acc[strings.Index(acc, "## The rows"):strings.Index(acc, "## The rules")]
	gauges := ""
	for _, l := range strings.Split(ops, "\n") {
		if strings.HasPrefix(l, "| `gttsplit_lane_split_") {
			gauges += l + "\n"
		}
	}
	require.NotEmpty(t, gauges)
	for _, row := range Rows {
		require.True(t, strings.Contains(rows, "`"+row.JSON+"`"), "docs/accounting.md's table of the rows does not name %s", row.JSON)
		if row.Gauge != "" {
			require.True(t, strings.Contains(gauges, "`"+row.Gauge+"`"), "docs/operations.md's lane gauges do not name %s", row.Gauge)
		}
	}
}

// A change is of the figures as the report has them (two decimals), a
// change from 0 has no share and is always beyond a threshold.
func TestRowChange(t *testing.T) {
	t.Parallel()
	row, _ := RowOf("packed")
	m := func(v float64) *MiB { x := MiB(v); return &x }
	_, ok := row.Change(nil, m(1))
	require.False(t, ok)
	d, ok := row.Change(m(100), m(110.004))
	require.True(t, ok)
	require.InDelta(t, 10, float64(d.Diff), 1e-9)
	require.InDelta(t, 10, float64(*d.Pct), 1e-9)
	require.True(t, d.Beyond(5))
	require.False(t, d.Beyond(10))
	d, _ = row.Change(m(0.004), m(0))
	require.Equal(t, MiB(0), *d.Pct, "both 0 at two decimals")
	require.False(t, d.Beyond(0))
	d, _ = row.Change(m(0), m(795.8))
	require.True(t, d.FromZero)
	require.Nil(t, d.Pct)
	require.True(t, d.Beyond(1e9))
	require.Nil(t, row.Diff(m(1), nil))
	require.Equal(t, MiB(-2), *row.Diff(m(1), m(3)))

	// The model buffer a comparison reads: 0 when it is all host memory.
	model, _ := RowOf("model")
	require.Equal(t, MiB(0), *model.Compared(Report{ModelHostMiB: m(304)}))
	require.Nil(t, model.Of(Report{ModelHostMiB: m(304)}))
	require.Nil(t, model.Compared(Report{}))
}
