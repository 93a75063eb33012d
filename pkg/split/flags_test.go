package split

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every flag constant is in the flag table once, with its words (a flag
// left out of it would never be listed in a report; state_capped once
// rendered as a bare name).
func TestEveryFlagSaysWhatItMeans(t *testing.T) {
	t.Parallel()
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "flags.go", nil, 0)
	require.NoError(t, err)
	var consts []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if strings.HasPrefix(name.Name, "Flag") {
					v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
					require.NoError(t, err)
					consts = append(consts, v)
				}
			}
		}
	}
	require.NotEmpty(t, consts)
	seen := map[string]bool{}
	for _, e := range flagTable {
		require.False(t, seen[e.name], "%s twice in flagTable", e.name)
		seen[e.name] = true
		require.NotEmpty(t, e.text, e.name)
		require.Equal(t, e.text, FlagText[e.name])
	}
	for _, c := range consts {
		require.True(t, seen[c], "flag %s is not in flagTable: no report would list it", c)
	}
	require.Len(t, flagTable, len(consts))
}

// words is what a report says in words (what its text form prints of
// them): its flags' meanings, its checks, its warnings and its expected
// line.
func words(r Report) string {
	var s []string
	for _, f := range r.Flags {
		s = append(s, f+": "+FlagWords(r, f))
	}
	for _, c := range r.Checks {
		s = append(s, c.Name+": "+c.Detail)
	}
	s = append(s, r.Detail.Warnings...)
	return strings.Join(append(s, r.Expected), "\n")
}

// Replacing raises replaces_incomplete once, in the table's order, and
// leaves a copy of the report that shares its flags as it was.
func TestReplacingRaisesItsFlagInOrder(t *testing.T) {
	t.Parallel()
	flags := make([]string, 0, 8)
	flags = append(flags, FlagNoTrace, FlagIncomplete, FlagStateCapped)
	r := Report{Flags: flags}
	copied := r
	r.Replacing(Replaced{Written: "2026-11-07T15:10:00Z", Split: 1, Missing: []string{"samples: 3 of 412 (the last at seq 411)"}})
	r.Replacing(Replaced{Written: "2026-11-07T15:10:00Z", Split: 1})
	require.Equal(t, []string{FlagNoTrace, FlagIncomplete, FlagReplaces, FlagStateCapped}, r.Flags)
	require.Equal(t, []string{FlagNoTrace, FlagIncomplete, FlagStateCapped}, copied.Flags)
	require.Equal(t, 1, r.Run.Replaces.Split)
	require.Contains(t, FlagWords(r, FlagReplaces), "written at 2026-11-07T15:10:00Z (split 1)")
	require.Contains(t, FlagText[FlagReplaces], "run.replaces says")
}
