package main

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
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
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Cmds:                clitest.Commands(),
		Setup: func(e *testscript.Env) error {
			if err := clitest.Setup(e); err != nil {
				return err
			}
			e.Setenv("PATH", bin+string(filepath.ListSeparator)+e.Getenv("PATH"))
			return nil
		},
	})
}
