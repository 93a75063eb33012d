package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	equate := cmpopts.EquateEmpty()
	decode := func(t *testing.T, ev event.Event) events.Decoded {
		t.Helper()
		b, err := events.Marshal(ev)
		require.NoError(t, err)
		d, err := events.DecodeBytes(b)
		require.NoError(t, err)
		require.Equal(t, origin, d.Origin)
		require.Equal(t, ev.ID(), d.ID)
		return d
	}

	t.Run("run started", func(t *testing.T) {
		ev, err := events.NewRunStarted(exampleRunInfo(), exampleStartDetail())
		require.NoError(t, err)
		d := decode(t, ev)
		require.Equal(t, events.TypeRunStarted, d.Type)
		require.Empty(t, cmp.Diff(exampleRunInfo(), d.Started.Info, equate))
		require.Empty(t, cmp.Diff(exampleStartDetail(), d.Started.Detail, equate))
		require.True(t, d.Time.Equal(t0))
	})
	t.Run("run started without a log", func(t *testing.T) {
		info := exampleRunInfo()
		info.NoLog = true
		ev, err := events.NewRunStarted(info, exampleStartDetail())
		require.NoError(t, err)
		require.Contains(t, string(ev.Data()), `"no_log":true`)
		d := decode(t, ev)
		require.True(t, d.Started.Info.NoLog)
		// A run with a log says nothing of it (events of older collectors
		// neither).
		ev, err = events.NewRunStarted(exampleRunInfo(), exampleStartDetail())
		require.NoError(t, err)
		require.NotContains(t, string(ev.Data()), "no_log")
	})
	t.Run("log lines", func(t *testing.T) {
		ev, err := events.NewLogLines(origin, exampleLines())
		require.NoError(t, err)
		d := decode(t, ev)
		require.Empty(t, cmp.Diff(exampleLines(), d.Lines, equate))
		require.Equal(t, origin.RunID+"/stderr/212-214", d.ID)
	})
	t.Run("fdinfo sample", func(t *testing.T) {
		ev, err := events.NewFDInfoSample(origin, exampleSample())
		require.NoError(t, err)
		d := decode(t, ev)
		require.Empty(t, cmp.Diff(exampleSample(), *d.Sample, equate))
		require.Equal(t, exampleFDInfo, d.Sample.Procs[0].FDs[0].Text, "fdinfo text must be carried verbatim")
	})
	t.Run("empty sample", func(t *testing.T) {
		ev, err := events.NewFDInfoSample(origin, split.Sample{Seq: 3})
		require.NoError(t, err)
		d := decode(t, ev)
		require.Empty(t, cmp.Diff(split.Sample{Seq: 3}, *d.Sample, equate))
		require.True(t, ev.Time().IsZero(), "no time attribute without a sample time")
	})
	t.Run("run finished", func(t *testing.T) {
		f, det := exampleFinish()
		det.DroppedEvents = 17
		f.ExitCode, f.Signal = nil, "SIGTERM"
		ev, err := events.NewRunFinished(origin, f, det)
		require.NoError(t, err)
		d := decode(t, ev)
		require.Empty(t, cmp.Diff(events.Finished{Info: f, Detail: det}, *d.Finished, equate))
	})
	t.Run("split", func(t *testing.T) {
		ev, err := events.NewSplit(exampleReport(), 3)
		require.NoError(t, err)
		d := decode(t, ev)
		require.Equal(t, 3, d.SplitN)
		require.Equal(t, origin.RunID+"/split/3", d.ID)
		want, err := split.JSON(exampleReport())
		require.NoError(t, err)
		got, err := split.JSON(*d.Split)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
	})
}

func TestIDsAndAttributes(t *testing.T) {
	t.Parallel()
	wantIDs := map[string]string{
		events.TypeRunStarted:   origin.RunID + "/started/0",
		events.TypeLogLines:     origin.RunID + "/stderr/212-214",
		events.TypeFDInfoSample: origin.RunID + "/fdinfo/7",
		events.TypeRunFinished:  origin.RunID + "/finished/0",
		events.TypeSplit:        origin.RunID + "/split/0",
	}
	for _, ev := range exampleEvents(t) {
		require.Equal(t, wantIDs[ev.Type()], ev.ID())
		require.Equal(t, "urn:gttsplit:collector:strix1", ev.Source())
		require.Equal(t, origin.RunID, ev.Subject())
		require.Equal(t, "application/json", ev.DataContentType())
		require.Equal(t, "1.0", ev.SpecVersion())
		ext := ev.Extensions()
		require.Equal(t, origin.RunID, ext["runid"])
		require.Equal(t, origin.Host, ext["host"])
		require.Equal(t, origin.Lane, ext["lane"])
		require.False(t, ev.Time().IsZero(), ev.Type())
	}
}

// TestDeterministic builds every example twice, the second time from times
// in another location: the bytes must be identical.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	first := exampleEvents(t)
	loc := time.FixedZone("CET", 3600)
	info := exampleRunInfo()
	info.Started = info.Started.In(loc)
	again, err := events.NewRunStarted(info, exampleStartDetail())
	require.NoError(t, err)
	a, err := events.Marshal(first[0])
	require.NoError(t, err)
	b, err := events.Marshal(again)
	require.NoError(t, err)
	require.Equal(t, string(a), string(b))

	second := exampleEvents(t)
	for i := range first {
		a, err := events.Marshal(first[i])
		require.NoError(t, err)
		b, err := events.Marshal(second[i])
		require.NoError(t, err)
		require.Equal(t, string(a), string(b))
		require.NotContains(t, string(a), "\n", "the wire form is one line")
	}
}

func TestConstructorErrors(t *testing.T) {
	t.Parallel()
	lines := exampleLines()
	gap := append([]split.Line(nil), lines...)
	gap[2].Seq++
	mixed := append([]split.Line(nil), lines...)
	mixed[1].Stream = "stdout"
	reserved := append([]split.Line(nil), lines...)
	for i := range reserved {
		reserved[i].Stream = "fdinfo"
	}
	report := exampleReport()
	report.Schema = "gttsplit.split.v0"
	nan := exampleReport()
	bad := split.MiB(0)
	bad /= bad
	nan.PeakGTTMiB = &bad

	cases := map[string]func() (event.Event, error){
		"empty batch":     func() (event.Event, error) { return events.NewLogLines(origin, nil) },
		"seq gap":         func() (event.Event, error) { return events.NewLogLines(origin, gap) },
		"mixed streams":   func() (event.Event, error) { return events.NewLogLines(origin, mixed) },
		"reserved stream": func() (event.Event, error) { return events.NewLogLines(origin, reserved) },
		"no run id": func() (event.Event, error) {
			return events.NewFDInfoSample(events.Origin{Host: "h"}, split.Sample{})
		},
		"no host": func() (event.Event, error) {
			return events.NewFDInfoSample(events.Origin{RunID: "r"}, split.Sample{})
		},
		"blank run id": func() (event.Event, error) {
			return events.NewFDInfoSample(events.Origin{RunID: " ", Host: "h"}, split.Sample{})
		},
		"control char in host": func() (event.Event, error) {
			return events.NewFDInfoSample(events.Origin{RunID: "r", Host: "h\n"}, split.Sample{})
		},
		"invalid utf8 lane": func() (event.Event, error) {
			return events.NewFDInfoSample(events.Origin{RunID: "r", Host: "h", Lane: "\xff"}, split.Sample{})
		},
		"negative duration": func() (event.Event, error) {
			return events.NewRunFinished(origin, split.FinishInfo{}, events.FinishDetail{Duration: -1})
		},
		"wrong schema":     func() (event.Event, error) { return events.NewSplit(report, 0) },
		"negative split n": func() (event.Event, error) { return events.NewSplit(exampleReport(), -1) },
		"NaN in report":    func() (event.Event, error) { return events.NewSplit(nan, 0) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := build()
			require.ErrorIs(t, err, events.ErrInvalid)
		})
	}
}

// mutate returns the wire form of the example of type typ after f changed
// its decoded JSON object.
func mutate(t *testing.T, typ string, f func(ev *event.Event)) []byte {
	t.Helper()
	for _, ev := range exampleEvents(t) {
		if ev.Type() == typ {
			ev = ev.Clone()
			f(&ev)
			b, err := ev.MarshalJSON()
			require.NoError(t, err)
			return b
		}
	}
	t.Fatalf("no example of %s", typ)
	return nil
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	lines, sample, split0 := events.TypeLogLines, events.TypeFDInfoSample, events.TypeSplit
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"not json", []byte("load_tensors: hello"), events.ErrInvalid},
		{"json array", []byte(`[1,2]`), events.ErrInvalid},
		{"no specversion", []byte(`{"id":"a","source":"b","type":"c"}`), events.ErrInvalid},
		{"spec 0.3", []byte(`{"specversion":"0.3","id":"r/fdinfo/1","source":"urn:gttsplit:collector:h","type":"io.gttsplit.fdinfo.sample.v1","subject":"r","runid":"r","host":"h","lane":"","datacontenttype":"application/json","data":{"seq":1}}`), events.ErrInvalid},
		{"non-string data_base64", []byte(`{"specversion":"1.0","data_base64":1}`), events.ErrInvalid},
		{"missing id", []byte(`{"specversion":"1.0","source":"s","type":"io.gttsplit.run.started.v1"}`), events.ErrInvalid},
		{"unknown type", mutate(t, lines, func(ev *event.Event) { ev.SetType("com.example.other.v1") }), events.ErrUnknownType},
		{"unknown version", mutate(t, lines, func(ev *event.Event) { ev.SetType("io.gttsplit.log.lines.v2") }), events.ErrUnknownType},
		{"missing runid", mutate(t, lines, func(ev *event.Event) { ev.SetExtension("runid", nil) }), events.ErrInvalid},
		{"missing lane", mutate(t, lines, func(ev *event.Event) { ev.SetExtension("lane", nil) }), events.ErrInvalid},
		{"numeric host", mutate(t, lines, func(ev *event.Event) { ev.SetExtension("host", 7) }), events.ErrInvalid},
		{"foreign source", mutate(t, lines, func(ev *event.Event) { ev.SetSource("urn:other") }), events.ErrInvalid},
		{"subject not run", mutate(t, lines, func(ev *event.Event) { ev.SetSubject("other") }), events.ErrInvalid},
		{"id not position", mutate(t, lines, func(ev *event.Event) { ev.SetID(origin.RunID + "/stderr/1") }), events.ErrInvalid},
		{"random id", mutate(t, sample, func(ev *event.Event) { ev.SetID("4f6b0d3e-1c1e-4a57-9d4c-7c2b1f3d2a10") }), events.ErrInvalid},
		{"split id without n", mutate(t, split0, func(ev *event.Event) { ev.SetID(origin.RunID + "/split/x") }), events.ErrInvalid},
		{"xml data", mutate(t, lines, func(ev *event.Event) { ev.SetDataContentType("application/xml") }), events.ErrInvalid},
		{"no data", mutate(t, lines, func(ev *event.Event) { ev.DataEncoded = nil }), events.ErrInvalid},
		{"base64 data", mutate(t, lines, func(ev *event.Event) { ev.DataBase64 = true }), events.ErrInvalid},
		{"data not object", mutate(t, lines, func(ev *event.Event) { ev.DataEncoded = []byte(`"text"`) }), events.ErrInvalid},
		{"no lines", mutate(t, lines, func(ev *event.Event) {
			ev.DataEncoded = []byte(`{"stream":"stderr","first_seq":212,"lines":[]}`)
		}), events.ErrInvalid},
		{"reserved stream", mutate(t, lines, func(ev *event.Event) {
			ev.SetID(origin.RunID + "/split/212")
			ev.DataEncoded = []byte(`{"stream":"split","first_seq":212,"lines":[{"text":"x"}]}`)
		}), events.ErrInvalid},
		{"seq overflow", mutate(t, lines, func(ev *event.Event) {
			ev.SetID(origin.RunID + "/stderr/18446744073709551615-0")
			ev.DataEncoded = []byte(`{"stream":"stderr","first_seq":18446744073709551615,"lines":[{"text":"a"},{"text":"b"}]}`)
		}), events.ErrInvalid},
		{"negative seq", mutate(t, sample, func(ev *event.Event) { ev.DataEncoded = []byte(`{"seq":-1}`) }), events.ErrInvalid},
		{"report of other run", mutate(t, split0, func(ev *event.Event) {
			ev.DataEncoded = []byte(strings.Replace(string(ev.DataEncoded), origin.RunID, "other", 1))
		}), events.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := events.DecodeBytes(c.in)
			require.Error(t, err)
			require.ErrorIs(t, err, c.want)
			other := events.ErrInvalid
			if c.want == events.ErrInvalid {
				other = events.ErrUnknownType
			}
			require.False(t, errors.Is(err, other), "%v must not also be %v", err, other)
		})
	}
}

func TestDecodeToleratesUnknownPayloadFields(t *testing.T) {
	t.Parallel()
	b := mutate(t, events.TypeFDInfoSample, func(ev *event.Event) {
		ev.DataEncoded = []byte(`{"seq":7,"future_field":{"x":1},"procs":[]}`)
	})
	d, err := events.DecodeBytes(b)
	require.NoError(t, err)
	require.Equal(t, uint64(7), d.Sample.Seq)
}

func TestBatches(t *testing.T) {
	t.Parallel()
	mk := func(stream string, seq uint64, text string) split.Line {
		return split.Line{Stream: stream, Seq: seq, Text: text}
	}
	lines := []split.Line{
		mk("stderr", 1, "aaaa"), mk("stderr", 2, "bbbb"), mk("stdout", 3, "cc"),
		mk("stderr", 4, "dd"), mk("stderr", 5, "ee"), mk("stderr", 6, "ff"),
		mk("stderr", 8, "gg"), mk("stderr", 9, strings.Repeat("h", 20)), mk("stderr", 10, "i"),
	}
	got := events.Batches(lines, 2, 10)
	var firsts []uint64
	for _, b := range got {
		_, err := events.NewLogLines(origin, b)
		require.NoError(t, err, "every batch is valid for NewLogLines")
		firsts = append(firsts, b[0].Seq)
	}
	require.Equal(t, []uint64{1, 3, 4, 6, 8, 9, 10}, firsts)
	require.Nil(t, events.Batches(nil, 0, 0))
	require.Len(t, events.Batches(lines[3:6], 0, 0), 1)
}

func TestUnmarshalRejectsTrailingGarbage(t *testing.T) {
	t.Parallel()
	ev, err := events.NewRunStarted(split.RunInfo{ID: "r", Host: "h", Lane: "l"}, events.StartDetail{})
	require.NoError(t, err)
	b, err := events.Marshal(ev)
	require.NoError(t, err)
	_, err = events.Unmarshal(b)
	require.NoError(t, err)
	_, err = events.Unmarshal(append(b, []byte("garbage")...))
	require.ErrorIs(t, err, events.ErrInvalid)
}
