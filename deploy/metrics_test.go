package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	rulesFile      = "deploy/prometheus/gttsplit-rules.yml"
	promConfigFile = "deploy/prometheus/prometheus.yml"
	dashboardFile  = "deploy/grafana/gttsplit-dashboard.json"
)

// notOurs are the metrics the rules and the dashboard read that the
// binaries do not export: Prometheus' own up, and the blackbox exporter's
// probe of /readyz (prometheus.yml's gttsplit-readyz job).
var notOurs = map[string]bool{"up": true, "probe_success": true}

func promParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// parseRules parses a rules file with Prometheus' own parser (what
// `promtool check rules` runs): the YAML, unknown fields, every
// expression, every label and annotation template.
func parseRules(t testing.TB, content []byte) (*rulefmt.RuleGroups, []error) {
	t.Helper()
	return rulefmt.Parse(content, false, model.UTF8Validation, promParser(), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// TestRulesParse checks deploy/prometheus/gttsplit-rules.yml, and that the
// parser does catch a broken expression, an unknown field and a broken
// template.
func TestRulesParse(t *testing.T) {
	content := []byte(readFile(t, rulesFile))
	groups, errs := parseRules(t, content)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	n := 0
	for _, g := range groups.Groups {
		n += len(g.Rules)
	}
	t.Logf("%d groups, %d rules", len(groups.Groups), n)
	for name, broken := range map[string]string{
		"expression": strings.Replace(string(content), "max(gttsplit_partitions_unowned) > 0", "max(gttsplit_partitions_unowned > 0", 1),
		"field":      strings.Replace(string(content), "for: 1m", "for: 1m\n        fro: 1m", 1),
		"template":   strings.Replace(string(content), "{{ $labels.instance }} does not", "{{ $labels.instance does not", 1),
	} {
		if broken == string(content) {
			t.Fatalf("the %s case changed nothing: update it with the rules", name)
		}
		if _, errs := parseRules(t, []byte(broken)); len(errs) == 0 {
			t.Errorf("a broken %s parsed", name)
		}
	}
}

// usedMetrics lists the metric names the rules' and the dashboard's
// expressions select, each with where it is used.
func usedMetrics(t testing.TB) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(where, expr string) {
		e, err := promParser().ParseExpr(expr)
		if err != nil {
			t.Fatalf("%s: %q: %v", where, expr, err)
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				name := vs.Name
				for _, m := range vs.LabelMatchers {
					if m.Name == model.MetricNameLabel {
						name = m.Value
					}
				}
				if name == "" {
					t.Errorf("%s: a selector without a metric name: %s", where, vs)
				}
				used[name] = append(used[name], where)
			}
			return nil
		})
	}
	groups, errs := parseRules(t, []byte(readFile(t, rulesFile)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			add("rule "+r.Alert+r.Record, r.Expr)
		}
	}
	d := readDashboard(t)
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			add(fmt.Sprintf("panel %q", p.Title), grafanaExpr(tg.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := regexp.MustCompile(`^label_values\((.+), *\w+\)$`).FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable %s: not label_values(selector, label): %q", v.Name, v.Definition)
		}
		add("variable "+v.Name, grafanaExpr(m[1]))
	}
	return used
}

// grafanaExpr replaces the dashboard's variables with values PromQL
// parses.
func grafanaExpr(expr string) string {
	return strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$instance", ".*", "$host", ".*", "$lane", ".*").Replace(expr)
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func readDashboard(t testing.TB) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboardShape checks what Grafana needs of each panel: a unique id,
// a place on the 24-column grid, the datasource variable, an expression
// per query; and that it charts what docs/operations.md says to watch.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Error("the dashboard needs a title and a uid")
	}
	ids := map[int]bool{}
	for _, p := range d.allPanels() {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v is off the grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || tg.Expr == "" {
				t.Errorf("panel %q: a query without refId or expr", p.Title)
			}
		}
	}
	used := usedMetrics(t)
	for _, m := range []string{
		"probe_success", "gttsplit_partitions_unowned", "gttsplit_partitions_stalled", "gttsplit_consumer_lag",
		"gttsplit_checkpoint_age_seconds", "gttsplit_sink_errors_total", "gttsplit_events_dead_lettered_total",
		"gttsplit_state_persist_errors_total", "gttsplit_fleet_members", "gttsplit_partitions_owned",
		"gttsplit_events_folded_total", "gttsplit_events_redelivered_total", "gttsplit_close_seconds_bucket",
		"gttsplit_lane_split_ratio", "gttsplit_lane_split_mib",
		"gttsplit_collector_spool_bytes", "gttsplit_collector_events_dropped_total", "gttsplit_collector_broker_connected",
	} {
		found := false
		for _, where := range used[m] {
			found = found || strings.HasPrefix(where, "panel")
		}
		if !found {
			t.Errorf("the dashboard does not chart %s", m)
		}
	}
}

// TestMetricsAreExported scrapes /metrics of a real `aggregator serve`,
// listening beyond loopback, with http.token as prometheus.yml sends it,
// after it folded three runs, dead-lettered an event, failed a sink's writes
// and deferred a split (the labelled counters appear only then), and
// checks that every metric the rules and the dashboard use is one it
// exports, or one a `collector attach` exports on its http.listen (beyond
// loopback too, with the token).
func TestMetricsAreExported(t *testing.T) {
	if testing.Short() {
		t.Skip("runs aggregator serve")
	}
	dir := t.TempDir()
	ports := freePorts(t, 3)
	reports := filepath.Join(dir, "reports")
	// One split held per sink: of the three runs' splits, the failing sink
	// has one in hand, holds at most one more and defers the third.
	// Listening beyond loopback, as deployed: /metrics needs http.token as
	// a bearer token (prometheus.yml sends it), the probes need none.
	const token = "scrape-token"
	agg := start(t, dir, "aggregator", []string{"GTTSPLIT_SINKS_MAX_PENDING=1", "GTTSPLIT_HTTP_TOKEN=" + token}, aggregatorBin(t), "serve",
		"--embedded-listen", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--store", filepath.Join(dir, "store"),
		"--http", fmt.Sprintf("0.0.0.0:%d", ports[1]), "--json-dir", filepath.Join(dir, "json"), "--file-dir", reports)
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), 60*time.Second, agg)
	if code, _, err := get(fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]), ""); err != nil || code != 200 {
		t.Errorf("/healthz without the token: %d %v", code, err)
	}
	if code, _, err := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]), ""); err != nil || code == 200 {
		t.Errorf("/metrics beyond loopback answered without the token: %d %v", code, err)
	}
	// A file where the file sink's directory was: its writes fail.
	if err := os.RemoveAll(reports); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(reports, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	if out, code := run(t, []string{"GTTSPLIT_SPOOL_DIR=" + filepath.Join(dir, "spool")}, collectorBin(t),
		"replay", "--nats-url", url, filepath.Join(repo(t), "testdata/runs/4b/events.jsonl"),
		filepath.Join(repo(t), "testdata/runs/27b/events.jsonl"), filepath.Join(repo(t), "testdata/controls/4b-ngl0/events.jsonl")); code != 0 {
		t.Fatalf("collector replay: exit %d\n%s", code, out)
	}
	nc := connect(t, url, "", "")
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "gttsplit.log.strix01.gpu0.poison", []byte(`{"not":"an event"}`)); err != nil {
		t.Fatal(err)
	}
	// A labelled counter appears with its first sample: scrape until every
	// metric the files use is there, or a minute has passed.
	used := usedMetrics(t)
	missing := func(exported map[string]bool) []string {
		var out []string
		for n := range used {
			if !exported[n] && !notOurs[n] {
				out = append(out, n)
			}
		}
		sort.Strings(out)
		return out
	}
	// A lane's collector, attached to this test's process, serving its
	// /metrics beyond loopback as deploy/systemd and deploy/kubernetes do.
	col := start(t, dir, "collector", []string{"GTTSPLIT_HTTP_TOKEN=" + token, "GTTSPLIT_SPOOL_DIR=" + filepath.Join(dir, "lane-spool"),
		"GTTSPLIT_ATTACH_STATE_DIR=" + filepath.Join(dir, "attach")}, collectorBin(t), "attach",
		"--pid", fmt.Sprint(os.Getpid()), "--nats-url", url, "--lane", "gpu0", "--http", fmt.Sprintf("0.0.0.0:%d", ports[2]))
	colMetrics := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[2])
	waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[2]), 30*time.Second, col)
	if code, _, err := get(colMetrics, ""); err != nil || code == 200 {
		t.Errorf("the collector's /metrics beyond loopback answered without the token: %d %v", code, err)
	}
	colFams, err := scrape(colMetrics, token)
	if err != nil {
		t.Fatal(err)
	}
	if v := sumMetric(colFams, "gttsplit_collector_broker_connected"); v != 1 {
		t.Errorf("gttsplit_collector_broker_connected = %v with the broker up", v)
	}

	var exported map[string]bool
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		fams, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]), token)
		if err != nil {
			t.Fatal(err)
		}
		exported = exportedNames(fams)
		for n := range exportedNames(colFams) {
			exported[n] = true
		}
		if len(missing(exported)) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, n := range missing(exported) {
		t.Errorf("%s is used by %s but neither aggregator serve nor the collector exports it", n, strings.Join(slices.Compact(used[n]), ", "))
	}
}

// TestRegressionsDocAlert: the alert docs/regressions.md shows parses with
// Prometheus' own parser and is the rule of gttsplit-rules.yml by that
// name, expression and annotations alike.
func TestRegressionsDocAlert(t *testing.T) {
	doc := readFile(t, "docs/regressions.md")
	i := strings.Index(doc, "```yaml\ngroups:\n")
	if i < 0 {
		t.Fatal("docs/regressions.md lost its alert")
	}
	block := doc[i+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	shown, errs := parseRules(t, []byte(block))
	if len(errs) > 0 {
		t.Fatalf("docs/regressions.md: %v", errs)
	}
	rules, errs := parseRules(t, []byte(readFile(t, rulesFile)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	n := 0
	for _, g := range shown.Groups {
		for _, r := range g.Rules {
			n++
			found := false
			for _, rg := range rules.Groups {
				for _, rr := range rg.Rules {
					if rr.Alert == r.Alert {
						found = true
						if rr.Expr != r.Expr || rr.Annotations["summary"] != r.Annotations["summary"] {
							t.Errorf("%s: docs/regressions.md shows %q (%q), %s has %q (%q)", r.Alert, r.Expr, r.Annotations["summary"], rulesFile, rr.Expr, rr.Annotations["summary"])
						}
					}
				}
			}
			if !found {
				t.Errorf("%s: not a rule of %s", r.Alert, rulesFile)
			}
		}
	}
	if n == 0 {
		t.Error("docs/regressions.md shows no rule")
	}
}

// TestPrometheusConfigLoads loads deploy/prometheus/prometheus.yml with
// Prometheus' own configuration loader (what `promtool check config`
// reads): its jobs are the ones the docs name, its rule file is the one
// TestRulesParse checks, and the loader does catch a mistake.
func TestPrometheusConfigLoads(t *testing.T) {
	content := readFile(t, promConfigFile)
	cfg, err := promconfig.Load(content, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("%s: %v", promConfigFile, err)
	}
	var jobs []string
	for _, sc := range cfg.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
	}
	if want := []string{"gttsplit-aggregator", "gttsplit-collector", "gttsplit-readyz"}; !slices.Equal(jobs, want) {
		t.Errorf("scrape jobs %v, want %v", jobs, want)
	}
	if want := filepath.Base(rulesFile); len(cfg.RuleFiles) != 1 || filepath.Base(cfg.RuleFiles[0]) != want {
		t.Errorf("rule_files %v, want %s", cfg.RuleFiles, want)
	}
	for name, broken := range map[string]string{
		"field":    strings.Replace(content, "scrape_interval: 15s", "scrape_interval: 15s\n  scrap_timeout: 10s", 1),
		"duration": strings.Replace(content, "scrape_interval: 15s", "scrape_interval: 15 seconds", 1),
		"job":      strings.Replace(content, "job_name: gttsplit-collector", "job_name: gttsplit-aggregator", 1),
	} {
		if broken == content {
			t.Fatalf("%s: the mistake was not made", name)
		}
		if _, err := promconfig.Load(broken, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
			t.Errorf("%s: a broken configuration loaded", name)
		}
	}
}
