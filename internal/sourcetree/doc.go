// Package sourcetree holds no code: its tests hold the repository's Go
// source to what a reader relies on when finding their way in it.
//
//   - No Go file but a test is over 900 lines (TestNoFileOverMaxLines): a
//     longer one holds several concerns, each worth a file of its own.
//   - A package doc with a file map (a section "# Files", or "# Files by
//     …", of indented lines each naming files, "a.go, b*.go", then what
//     they hold) names every Go file of its package but the doc's own and
//     its tests, and only files that exist (TestFileMapsNameTheFiles).
//
// The third rule, no function over a cyclomatic complexity of 40, is
// .ci/run's (gocyclo at a pinned version).
package sourcetree
