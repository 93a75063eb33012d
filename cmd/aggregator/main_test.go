package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
)

var update = flag.Bool("update", false, "rewrite the scripts' expected files (cmp) from the actual output")

// TestMain makes this test binary the aggregator itself, and the fakellama
// test program, when a script runs `exec aggregator ...` or `exec fakellama`.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"aggregator": main,
		"fakellama":  clitest.FakeLlama,
	})
}

// TestScript runs testdata/script/*.txtar with the environment of
// clitest.Setup. The pipeline scripts also need the collector: it is
// built once from ./cmd/collector (a package main cannot be imported) and
// put first on the scripts' PATH. Under -short it is not built and the
// pipeline scripts skip.
func TestScript(t *testing.T) {
	bin := t.TempDir()
	if !testing.Short() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := clitest.BuildCommand(ctx, bin, "github.com/gttsplit/gttsplit/cmd/collector"); err != nil {
			t.Fatal(err)
		}
	}
	cmds := clitest.Commands()
	maps.Copy(cmds, ghCommands())
	maps.Copy(cmds, laneCommands())
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Cmds:                cmds,
		Setup: func(e *testscript.Env) error {
			if err := clitest.Setup(e); err != nil {
				return err
			}
			e.Setenv("PATH", bin+string(filepath.ListSeparator)+e.Getenv("PATH"))
			gh := githubtest.Start(githubtest.WithToken(ghToken))
			e.Defer(gh.Close)
			e.Values[ghKey{}] = gh
			e.Setenv("GITHUB_API", gh.URL)
			e.Setenv("GH_TOKEN", ghToken)
			return nil
		},
	})
}

// ghToken is the only token the scripts' GitHub API server accepts.
const ghToken = "gh-test-token-5c1f"

type ghKey struct{}

// ghCommands are the script commands that drive the script's local GitHub
// API server (githubtest), whose base URL is $GITHUB_API and which accepts
// only the token $GH_TOKEN:
//
//	ghissue ISSUE...              create issues (OWNER/REPO#N), with no comment
//	ghcomments ISSUE              print each comment of ISSUE: a line
//	                              "comment id=N edits=N", then its body
//	ghwait ISSUE COMMENTS EDITS   wait until ISSUE has COMMENTS comments
//	                              edited EDITS times in all
//	ghfail N STATUS [SECONDS]     answer the next N requests with STATUS
//	                              (and Retry-After: SECONDS); ghfail 0
//	                              drops what is left of them
func ghCommands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	server := func(ts *testscript.TestScript) *githubtest.Server {
		return ts.Value(ghKey{}).(*githubtest.Server)
	}
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"ghissue": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) == 0 {
				ts.Fatalf("usage: ghissue ISSUE...")
			}
			for _, a := range args {
				server(ts).AddIssue(a)
			}
		},
		"ghcomments": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 1 {
				ts.Fatalf("usage: ghcomments ISSUE")
			}
			for _, c := range server(ts).Comments(args[0]) {
				fmt.Fprintf(ts.Stdout(), "comment id=%d edits=%d\n%s\n", c.ID, c.Edits, c.Body)
			}
		},
		"ghfail": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) < 1 || len(args) > 3 || (args[0] != "0" && len(args) < 2) {
				ts.Fatalf("usage: ghfail N STATUS [SECONDS]")
			}
			n, err := strconv.Atoi(args[0])
			if err != nil {
				ts.Fatalf("ghfail: N is a number")
			}
			if n == 0 {
				server(ts).ClearFailures()
				return
			}
			status, err := strconv.Atoi(args[1])
			if err != nil {
				ts.Fatalf("ghfail: STATUS is a number")
			}
			f := githubtest.Status(status)
			if len(args) == 3 {
				secs, err := strconv.Atoi(args[2])
				if err != nil {
					ts.Fatalf("ghfail: SECONDS is a number")
				}
				f = githubtest.RetryAfter(status, secs)
			}
			server(ts).FailNext(n, f)
		},
		"ghwait": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 3 {
				ts.Fatalf("usage: ghwait ISSUE COMMENTS EDITS")
			}
			wantC, err1 := strconv.Atoi(args[1])
			wantE, err2 := strconv.Atoi(args[2])
			if err1 != nil || err2 != nil {
				ts.Fatalf("ghwait: COMMENTS and EDITS are numbers")
			}
			deadline := time.Now().Add(clitest.WaitTimeout)
			for {
				cs := server(ts).Comments(args[0])
				edits := 0
				for _, c := range cs {
					edits += c.Edits
				}
				if len(cs) == wantC && edits == wantE {
					return
				}
				if time.Now().After(deadline) {
					ts.Fatalf("ghwait: %s has %d comments edited %d times after %s, want %d and %d",
						args[0], len(cs), edits, clitest.WaitTimeout, wantC, wantE)
				}
				time.Sleep(20 * time.Millisecond)
			}
		},
	}
}
