package events

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// liveFold folds a log the way the live pipeline does: the collector cuts
// it into lines at '\n' (a last line without one is a line too), numbers
// them from 1, sends them in log-lines events of up to 256 lines, and the
// aggregator decodes each event and applies it to the run's fold.
func liveFold(t *testing.T, log []byte) split.Report {
	t.Helper()
	o := Origin{RunID: "r1", Host: "h1", Lane: "l1"}
	f := split.NewFold(split.Options{})
	var lines []split.Line
	flush := func() {
		if len(lines) == 0 {
			return
		}
		ev, err := NewLogLines(o, lines)
		if err != nil {
			t.Fatalf("NewLogLines: %v", err)
		}
		w, err := ToWire(ev)
		if err != nil {
			t.Fatalf("ToWire: %v", err)
		}
		d, err := DecodeBytes(w.Data)
		if err != nil {
			t.Fatalf("DecodeBytes: %v", err)
		}
		f.Apply(d.Input())
		lines = lines[:0]
	}
	rest := log
	for seq := uint64(1); len(rest) > 0; seq++ {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		lines = append(lines, split.Line{Stream: "stderr", Seq: seq, Text: string(line)})
		if len(lines) == 256 {
			flush()
		}
	}
	flush()
	return f.Report()
}

// offlineFold folds a log as `aggregator parse LOG` does.
func offlineFold(t *testing.T, log []byte) split.Report {
	t.Helper()
	f := split.NewFold(split.Options{})
	if _, err := f.ReadLog(bytes.NewReader(log), "stderr"); err != nil {
		t.Fatalf("ReadLog: %v", err)
	}
	return f.Report()
}

// FuzzParseMatchesLive: `aggregator parse` of a saved log and the live
// fold of the same output, carried in events, give the same split.
func FuzzParseMatchesLive(f *testing.F) {
	for _, glob := range []string{"../../testdata/runs/*/split.log", "../../testdata/logs/*/*.log"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			if len(b) > 32<<10 {
				b = b[:32<<10]
			}
			f.Add(b)
		}
	}
	f.Add([]byte("load_tensors:        ROCm0 model buffer size =  2375.91 MiB\n"))
	f.Add([]byte("load_tensors:        ROCm0 model buffer size =  2375.91 MiB\r\n"))
	f.Fuzz(func(t *testing.T, log []byte) {
		want, err := split.JSON(offlineFold(t, log))
		if err != nil {
			t.Fatal(err)
		}
		got, err := split.JSON(liveFold(t, log))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Fatalf("parse and live fold differ on %q:\nparse: %s\nlive:  %s", log, want, got)
		}
	})
}
