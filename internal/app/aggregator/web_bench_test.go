package aggregator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// BenchmarkLivePage measures the live page of a real `aggregator serve`
// process holding 10,000 closed runs (GTTSPLIT_BENCH_RUNS to change it),
// each the whole 4B run under its own run id: the time and size of the
// first GET / (no report read yet: cold-ms, KB), of the next one
// (warm-ms), and of the page after it (page2-ms).
//
//	go test ./internal/app/aggregator -run '^$' -bench LivePage -benchtime 1x
func BenchmarkLivePage(b *testing.B) {
	n := benchRuns(b)
	bin := buildAggregator(b)
	fx := loadFixture(b, fixture4B)
	for i := 0; i < b.N; i++ {
		br, addr, _ := startBenchServe(b, bin, n)
		var wires []events.Wire
		for r := 0; r < n; r++ {
			o := events.Origin{RunID: fmt.Sprintf("page-%05d-%d", r, i), Host: fx.Origin.Host, Lane: fx.Origin.Lane}
			for _, d := range fx.Decoded {
				w, err := rt.Rewrite(d, o)
				require.NoError(b, err)
				wires = append(wires, w)
			}
			if (r+1)%20 == 0 || r == n-1 {
				br.publish(b, wires...)
				wires = wires[:0]
			}
		}
		waitProgress(b, "every run closed and listed", func() (float64, bool) {
			_, page := tryGet(addr, "/runs?limit=10000")
			var list []runtable.RunSummary
			_ = json.Unmarshal([]byte(page), &list)
			closed := 0
			for _, s := range list {
				if s.State == "closed" {
					closed++
				}
			}
			return float64(closed), closed >= n
		})
		get := func(path string) (time.Duration, int) {
			start := time.Now()
			resp, err := http.Get("http://" + addr + path)
			require.NoError(b, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(b, err)
			require.Equal(b, http.StatusOK, resp.StatusCode)
			return time.Since(start), len(body)
		}
		cold, size := get("/")
		warm, _ := get("/")
		_, page := tryGet(addr, "/")
		next := ""
		if m := nextLink.FindStringSubmatch(page); m != nil {
			next = m[1]
		}
		page2 := time.Duration(0)
		if next != "" {
			page2, _ = get("/?" + next)
		}
		b.ReportMetric(float64(cold.Microseconds())/1000, "cold-ms")
		b.ReportMetric(float64(warm.Microseconds())/1000, "warm-ms")
		b.ReportMetric(float64(page2.Microseconds())/1000, "page2-ms")
		b.ReportMetric(float64(size)/1000, "KB")
		b.ReportMetric(float64(n), "runs")
	}
}

var nextLink = regexp.MustCompile(`<a href="/\?([^"]*)" id="next-page">`)
