package events_test

import (
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

func TestToken(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":              "_",
		"strix1":        "strix1",
		"gpu0":          "gpu0",
		"host.lan":      "host_lan",
		"a*b":           "a_b",
		">":             "_",
		"two words":     "two_words",
		"tab\there":     "tab_here",
		"nl\r\n":        "nl__",
		"nbsp\u00a0x":   "nbsp_x",
		"bad\xffutf8":   "bad_utf8",
		"ümlaut-ok/1:2": "ümlaut-ok/1:2",
	}
	for in, want := range cases {
		require.Equal(t, want, events.Token(in), "Token(%q)", in)
		require.True(t, server.IsValidLiteralSubject("x."+events.Token(in)), "Token(%q) is a literal token", in)
	}
	long := strings.Repeat("é", 100)
	tok := events.Token(long)
	require.LessOrEqual(t, len(tok), events.MaxTokenBytes)
	require.NotEqual(t, tok, events.Token(long+"x"), "long tokens keep a hash of the whole input")
	require.True(t, server.IsValidLiteralSubject("x."+tok))
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	evs := exampleEvents(t)
	want := map[string]string{
		events.TypeRunStarted:   "gttsplit.run.strix1.gpu0.strix1-20250314T092653Z-4b",
		events.TypeLogLines:     "gttsplit.log.strix1.gpu0.strix1-20250314T092653Z-4b",
		events.TypeFDInfoSample: "gttsplit.fdinfo.strix1.gpu0.strix1-20250314T092653Z-4b",
		events.TypeRunFinished:  "gttsplit.run.strix1.gpu0.strix1-20250314T092653Z-4b",
		events.TypeSplit:        "gttsplit.split.strix1.gpu0.strix1-20250314T092653Z-4b",
	}
	for _, ev := range evs {
		subj, err := events.SubjectOf(ev)
		require.NoError(t, err)
		require.Equal(t, want[ev.Type()], subj)
		require.True(t, server.IsValidLiteralSubject(subj))
		require.True(t, server.SubjectMatchesFilter(subj, events.StreamSubjects))
	}
	require.Equal(t, "gttsplit.dlq.h_1._.run_1", events.Subject(events.KindDLQ, "h.1", "", "run 1"))

	_, err := events.KindOf("io.gttsplit.log.lines.v9")
	require.ErrorIs(t, err, events.ErrUnknownType)
}

// TestFilters checks the filters against NATS's own subject matching.
func TestFilters(t *testing.T) {
	t.Parallel()
	subj := func(k events.Kind, host, lane, run string) string { return events.Subject(k, host, lane, run) }
	all := []string{
		subj(events.KindLog, "h1", "gpu0", "r1"),
		subj(events.KindLog, "h1", "gpu1", "r2"),
		subj(events.KindFDInfo, "h1", "gpu0", "r1"),
		subj(events.KindRun, "h2", "gpu0", "r3"),
		subj(events.KindLog, "h2", "gpu0", "r3"),
		subj(events.KindSplit, "h2", "gpu1", "r4"),
		subj(events.KindLog, "h.3", "", "r.5"),
	}
	cases := []struct {
		filter string
		want   []int
	}{
		{events.Filter("", "", "", ""), []int{0, 1, 2, 3, 4, 5, 6}},
		{events.Filter("", "h1", "", ""), []int{0, 1, 2}},
		{events.Filter(events.KindLog, "", "gpu0", ""), []int{0, 4}},
		{events.Filter("", "", "", "r3"), []int{3, 4}},
		{events.Filter(events.KindSplit, "", "", ""), []int{5}},
		{events.Filter(events.KindLog, "h.3", "", "r.5"), []int{6}},
		{events.Filter(events.KindLog, "h1", "gpu1", "r2"), []int{1}},
	}
	require.Equal(t, "gttsplit.*.h1.>", events.Filter("", "h1", "", ""))
	require.Equal(t, "gttsplit.log.*.gpu0.>", events.Filter(events.KindLog, "", "gpu0", ""))
	require.Equal(t, "gttsplit.>", events.Filter("", "", "", ""))
	require.Equal(t, "gttsplit.*.*.*.r3", events.Filter("", "", "", "r3"))
	for _, c := range cases {
		require.True(t, server.IsValidSubject(c.filter), c.filter)
		var got []int
		for i, s := range all {
			if server.SubjectMatchesFilter(s, c.filter) {
				got = append(got, i)
			}
		}
		require.Equal(t, c.want, got, c.filter)
	}
}
