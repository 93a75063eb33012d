package sourcetree

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// MaxLines bounds a Go file that is not a test.
const MaxLines = 900

// root is the repository's root, from this package's directory.
const root = "../.."

// goFiles returns the Go files of the repository that are not tests, by
// directory (slash-separated, relative to the root), each directory's
// sorted; testdata, hidden directories and their contents are left out.
func goFiles(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			dir := filepath.ToSlash(rel)
			out[dir] = append(out[dir], name)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out)
	for _, fs := range out {
		slices.Sort(fs)
	}
	return out
}

func lines(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
	}
	require.NoError(t, sc.Err())
	return n
}

func TestNoFileOverMaxLines(t *testing.T) {
	t.Parallel()
	for dir, names := range goFiles(t) {
		for _, name := range names {
			if n := lines(t, filepath.Join(root, dir, name)); n > MaxLines {
				t.Errorf("%s/%s has %d lines, more than %d: split it by what its parts do (and say so in the package doc's file map)", dir, name, n, MaxLines)
			}
		}
	}
}

// fileMapHeading is the heading of a package doc's file map.
var fileMapHeading = regexp.MustCompile(`^# Files\b`)

// fileMap reads the file map of the package doc among names (the Go files
// of dir): the doc's file, and each entry with the files it names ("a.go",
// "b*.go"); ok is false when the doc has none.
func fileMap(t *testing.T, dir string, names []string) (docFile string, entries []string, ok bool) {
	t.Helper()
	fset := token.NewFileSet()
	for _, name := range names {
		f, err := parser.ParseFile(fset, filepath.Join(root, dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		require.NoError(t, err)
		if f.Doc == nil {
			continue
		}
		in := false
		for _, l := range strings.Split(f.Doc.Text(), "\n") {
			switch {
			case fileMapHeading.MatchString(l):
				in, ok, docFile = true, true, name
			case strings.HasPrefix(l, "# "):
				in = false
			case in && strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t "):
				// "\tname.go, other.go   what they hold": the names are
				// the column before the first run of spaces.
				col, _, _ := strings.Cut(strings.TrimPrefix(l, "\t"), "  ")
				for _, e := range strings.Split(col, ",") {
					if e = strings.TrimSpace(e); e != "" {
						entries = append(entries, e)
					}
				}
			}
		}
		if ok {
			return docFile, entries, true
		}
	}
	return "", nil, false
}

func TestFileMapsNameTheFiles(t *testing.T) {
	t.Parallel()
	maps := 0
	for dir, names := range goFiles(t) {
		doc, entries, ok := fileMap(t, dir, names)
		if !ok {
			continue
		}
		maps++
		named := map[string]bool{}
		for _, e := range entries {
			if !strings.HasSuffix(e, ".go") {
				t.Errorf("%s/%s: the file map names %q, not a Go file", dir, doc, e)
				continue
			}
			hit := false
			for _, n := range names {
				if m, err := path.Match(e, n); err == nil && m {
					named[n], hit = true, true
				}
			}
			if !hit {
				t.Errorf("%s/%s: the file map names %s, which is no file of the package", dir, doc, e)
			}
		}
		for _, n := range names {
			if n != doc && !named[n] {
				t.Errorf("%s/%s: the file map does not name %s: add a line saying what it holds", dir, doc, n)
			}
		}
	}
	require.NotZero(t, maps, "no package doc has a file map: is the heading still # Files?")
}
