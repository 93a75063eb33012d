package main

import (
	"context"
	"flag"
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
// of clitest.Setup.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Cmds:                clitest.Commands(),
		Setup: func(e *testscript.Env) error {
			if err := clitest.Setup(e); err != nil {
				return err
			}
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
	nc, err := nats.Connect(url)
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
