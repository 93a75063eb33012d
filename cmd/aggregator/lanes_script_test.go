package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
)

// laneCommands are the script commands of the lane changes' scripts:
//
//	testdata DIR                  copy the repository's testdata/DIR to $WORK/DIR
//	freeport VAR                  set VAR to a free TCP port on 127.0.0.1
//	repofile PATH DST             copy the repository's file PATH to $WORK/DST
//	                              (with its mode)
//	eventlog EVENTS LOG           write the log lines a recorded stream holds
//	                              to LOG, as the process printed them
//	waitmetric SERIES MIN URL...  wait until the sum of SERIES (a metric's
//	                              name with its labels, as /metrics writes
//	                              it) over the /metrics of each URL is at
//	                              least MIN
func laneCommands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"testdata": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 1 {
				ts.Fatalf("usage: testdata DIR")
			}
			src := filepath.Join(clitest.RepoRoot, "testdata", filepath.FromSlash(args[0]))
			ts.Check(os.CopyFS(ts.MkAbs(args[0]), os.DirFS(src)))
		},
		"repofile": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 2 {
				ts.Fatalf("usage: repofile PATH DST")
			}
			src := filepath.Join(clitest.RepoRoot, filepath.FromSlash(args[0]))
			fi, err := os.Stat(src)
			ts.Check(err)
			b, err := os.ReadFile(src)
			ts.Check(err)
			ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, fi.Mode().Perm()))
		},
		"eventlog": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 2 {
				ts.Fatalf("usage: eventlog EVENTS LOG")
			}
			f, err := os.Open(ts.MkAbs(args[0]))
			ts.Check(err)
			defer f.Close()
			var out strings.Builder
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<24)
			for sc.Scan() {
				var e struct {
					Type string `json:"type"`
					Data struct {
						Lines []struct {
							Text string `json:"text"`
						} `json:"lines"`
					} `json:"data"`
				}
				ts.Check(json.Unmarshal(sc.Bytes(), &e))
				if e.Type == "io.gttsplit.log.lines.v1" {
					for _, l := range e.Data.Lines {
						out.WriteString(l.Text + "\n")
					}
				}
			}
			ts.Check(sc.Err())
			ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(out.String()), 0o644))
		},
		"freeport": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 1 {
				ts.Fatalf("usage: freeport VAR")
			}
			port, err := clitest.FreePort()
			ts.Check(err)
			ts.Setenv(args[0], strconv.Itoa(port))
		},
		"waitmetric": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) < 3 {
				ts.Fatalf("usage: waitmetric SERIES MIN URL...")
			}
			want, err := strconv.ParseFloat(args[1], 64)
			ts.Check(err)
			deadline := time.Now().Add(clitest.WaitTimeout)
			for {
				sum := 0.0
				for _, u := range args[2:] {
					sum += scrape(u, args[0])
				}
				if sum >= want {
					return
				}
				if time.Now().After(deadline) {
					ts.Fatalf("waitmetric: %s is %g after %s, want at least %g", args[0], sum, clitest.WaitTimeout, want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		},
	}
}

// scrape is series' value on u's /metrics (0 when u does not answer or
// has none).
func scrape(u, series string) float64 {
	resp, err := http.Get(strings.TrimRight(u, "/") + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return 0
}
