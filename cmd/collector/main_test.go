package main

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

var update = flag.Bool("update", false, "rewrite the scripts' expected files (cmp) from the actual output")

// TestMain makes this test binary the collector itself, and the fakellama
// test program, when a script runs `exec collector ...` or `exec fakellama`.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"collector": main,
		"fakellama": clitest.FakeLlama,
	})
}

// TestScript runs testdata/script/*.txtar. Every script gets a real
// embedded JetStream server with the events stream, as an aggregator
// makes it (a collector creates none), its URL in GTTSPLIT_NATS_URL (a
// script that must run without a broker clears it), and the environment
// of clitest.Setup. The scripts of `collector check` also need
// aggregators: the aggregator is built once from ./cmd/aggregator (a
// package main cannot be imported) and put first on the scripts' PATH;
// under -short it is not built and those scripts skip or stop.
func TestScript(t *testing.T) {
	bin := t.TempDir()
	if !testing.Short() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := clitest.BuildCommand(ctx, bin, "github.com/gttsplit/gttsplit/cmd/aggregator"); err != nil {
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
			srv, err := natstest.NewServer(e.WorkDir+"/.nats", -1)
			if err != nil {
				return err
			}
			e.Defer(func() { natstest.Shutdown(srv) })
			if err := eventsStream(srv.ClientURL()); err != nil {
				return err
			}
			e.Setenv("GTTSPLIT_NATS_URL", srv.ClientURL())
			return nil
		},
	})
}

// eventsStream creates the events stream on the server at url.
func eventsStream(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(natstest.ConnectTimeout))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = bus.EnsureStream(ctx, js, bus.DefaultStreamConfig(), zerolog.Nop())
	return err
}
