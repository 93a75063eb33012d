package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// repo is the main module's directory (the parent of deploy/).
func repo(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("the main module is not beside deploy/: %v", err)
	}
	return dir
}

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binMu  sync.Mutex
	binDir string
	bins   = map[string]string{}
)

// binary builds a program of the main module once per test process
// (./cmd/aggregator, ./cmd/collector, or the main module's nats-server
// version) and returns its path.
func binary(t testing.TB, pkg string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build the binaries")
	}
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := bins[pkg]; ok {
		return p
	}
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "gttsplit-deploy-bin-"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(binDir, filepath.Base(strings.TrimSuffix(pkg, "/v2")))
	cmd := exec.Command(gobin, "build", "-o", out, pkg)
	cmd.Dir = repo(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	bins[pkg] = out
	return out
}

func aggregatorBin(t testing.TB) string { return binary(t, "./cmd/aggregator") }
func collectorBin(t testing.TB) string  { return binary(t, "./cmd/collector") }
func natsServerBin(t testing.TB) string {
	return binary(t, "github.com/nats-io/nats-server/v2")
}

// freePorts returns n TCP ports free on 127.0.0.1 at the time of the call.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return out
}

// proc is a child process whose output goes to a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs bin with args and env (added to this process's environment),
// its output in dir/<name>.log; the test's end kills it.
func start(t testing.TB, dir, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s's output (the end):\n%s", p.name, tail(p.output(), 40))
		}
	})
	return p
}

// stop sends sig and waits up to limit for the exit; it returns how long
// the process took and its exit error.
func (p *proc) stop(t testing.TB, sig syscall.Signal, limit time.Duration) (time.Duration, error) {
	t.Helper()
	began := time.Now()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return time.Since(began), p.err
	case <-time.After(limit):
		t.Fatalf("%s still running %s after %v\n%s", p.name, limit, sig, p.output())
		return 0, nil
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitHTTP polls url until it answers 200 or the deadline passes,
// failing with the last answer and the process's output.
func waitHTTP(t testing.TB, url string, within time.Duration, p *proc) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		if p != nil && p.exited() {
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.output())
		}
		code, body, err := get(url, "")
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("%d %s %v", code, body, err)
		time.Sleep(200 * time.Millisecond)
	}
	out := ""
	if p != nil {
		out = p.output()
	}
	t.Fatalf("%s not 200 within %s: %s\n%s", url, within, last, out)
}

// get fetches url, with a bearer token when one is given.
func get(url, token string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// run runs bin to its end and returns its combined output and exit code.
func run(t testing.TB, env []string, bin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(b), 0
	case errors.As(err, &ee):
		return string(b), ee.ExitCode()
	default:
		t.Fatalf("%s %v: %v\n%s", bin, args, err, b)
		return "", -1
	}
}

// readFile reads a file of the repository (or one the test wrote, by its
// absolute path), failing the test when it cannot.
func readFile(t testing.TB, rel string) string {
	t.Helper()
	path := rel
	if !filepath.IsAbs(rel) {
		path = filepath.Join(repo(t), rel)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func shortCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t testing.TB, url, user, password string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.UserInfo(user, password), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// envFile reads a systemd environment file (KEY=value lines).
func envFile(t testing.TB, rel string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(readFile(t, rel)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.Contains(line, "=") {
			t.Fatalf("%s: not KEY=value: %q", rel, line)
		}
		out = append(out, line)
	}
	return out
}

// setEnv returns env with the given key, value pairs set (replaced or
// added).
func setEnv(env []string, kv ...string) []string {
	out := append([]string(nil), env...)
	for i := 0; i < len(kv); i += 2 {
		done := false
		for j, e := range out {
			if k, _, _ := strings.Cut(e, "="); k == kv[i] {
				out[j], done = kv[i]+"="+kv[i+1], true
			}
		}
		if !done {
			out = append(out, kv[i]+"="+kv[i+1])
		}
	}
	return out
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// natsSize reads a NATS size as the server does: 8MB, 8MiB and 8Mi are
// 8×1024², 8M is 8×1000², a bare number is bytes.
func natsSize(s string) (int64, error) {
	m := regexp.MustCompile(`^(\d+)\s*([a-z]*)$`).FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return 0, fmt.Errorf("not a size")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	for i, unit := range []string{"k", "m", "g"} {
		switch m[2] {
		case unit:
			return n * int64(math.Pow(1000, float64(i+1))), nil
		case unit + "b", unit + "i", unit + "ib":
			return n << (10 * (i + 1)), nil
		}
	}
	if m[2] != "" {
		return 0, fmt.Errorf("unknown unit %q", m[2])
	}
	return n, nil
}

// scrape reads a Prometheus text exposition.
func scrape(url, token string) (map[string]*dto.MetricFamily, error) {
	code, body, err := get(url, token)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("%s: %d %s", url, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(body))
}

// exportedNames are the series names a scrape holds: each family's name,
// and a histogram's or summary's _bucket, _sum and _count.
func exportedNames(fams map[string]*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for name, f := range fams {
		out[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	return out
}

// sumMetric adds up a counter's or gauge's samples.
func sumMetric(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return sum
}
