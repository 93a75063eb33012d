package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// systemdUnitDirs are where a Debian system keeps the units every service
// depends on (sysinit.target, basic.target, ...).
var systemdUnitDirs = []string{"/usr/lib/systemd/system", "/lib/systemd/system"}

// TestSystemdUnitsVerify runs `systemd-analyze verify` on the units, in a
// root of their own: the real binaries under /usr/local/bin, the host's
// stock units, the units installed as the docs say. verify also reports
// an unknown or misspelt setting only as a warning (exit 0), so any output
// fails the test.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := systemdRoot(t)
	for _, unit := range []string{"gttsplit-nats.service", "gttsplit-aggregator.service", "gttsplit-collector@gpu0.service"} {
		t.Run(unit, func(t *testing.T) {
			out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, unit).CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", unit, err, out)
			}
			// The exposure score, for the docs (not a pass/fail figure).
			sec, _ := exec.Command(analyze, "security", "--offline=yes", "--root="+root, unit).CombinedOutput()
			if m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+ \S+)`).FindSubmatch(sec); m != nil {
				t.Logf("%s: exposure %s", unit, m[1])
			}
		})
	}
}

// TestSystemdVerifyCatchesMistakes shows that the check above fails on a
// misspelt setting and on an ExecStart binary that is not there.
func TestSystemdVerifyCatchesMistakes(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := systemdRoot(t)
	unit := filepath.Join(root, "etc/systemd/system/gttsplit-aggregator.service")
	orig, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(string) string{
		"misspelt key": func(s string) string { return strings.Replace(s, "ProtectHome=", "ProtectHom=", 1) },
		"no binary": func(s string) string {
			return strings.Replace(s, "/usr/local/bin/aggregator", "/usr/local/bin/aggregatr", 1)
		},
	} {
		if err := os.WriteFile(unit, []byte(edit(string(orig))), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, "gttsplit-aggregator.service").CombinedOutput()
		if err == nil && len(strings.TrimSpace(string(out))) == 0 {
			t.Errorf("%s: systemd-analyze verify said nothing", name)
		}
	}
}

// TestSystemdStopTimeoutCoversDrain holds TimeoutStopSec to the drain the
// unit configures: longer than shutdown_timeout (and, for the collector,
// the child's kill grace on top).
func TestSystemdStopTimeoutCoversDrain(t *testing.T) {
	for unit, parts := range map[string][]string{
		"gttsplit-aggregator.service": {"GTTSPLIT_SHUTDOWN_TIMEOUT"},
		"gttsplit-collector@.service": {"GTTSPLIT_SHUTDOWN_TIMEOUT", "GTTSPLIT_WRAP_KILL_GRACE"},
	} {
		u := parseUnit(readFile(t, filepath.Join("deploy/systemd", unit)))
		stop, err := time.ParseDuration(strings.TrimSpace(u["TimeoutStopSec"][0]))
		if err != nil {
			t.Fatalf("%s: TimeoutStopSec: %v", unit, err)
		}
		env := unitEnv(u)
		var drain time.Duration
		for _, k := range parts {
			d, err := time.ParseDuration(env[k])
			if err != nil {
				t.Fatalf("%s: %s=%q: %v", unit, k, env[k], err)
			}
			drain += d
		}
		if stop <= drain {
			t.Errorf("%s: TimeoutStopSec %v does not outlast the drain %v (%s)", unit, stop, drain, strings.Join(parts, " + "))
		}
	}
}

// systemdAnalyze finds systemd-analyze. Without it the tests skip, except
// under CI=true, where .ci/run installs Debian's systemd and a missing
// tool fails them.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed (Debian's systemd package; .ci/run installs it)")
		}
		t.Skip("systemd-analyze is not installed (apt-get install systemd)")
	}
	return p
}

// systemdRoot lays out a root for systemd-analyze: the built binaries,
// the host's stock units, the units and environment files of deploy/systemd.
func systemdRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "etc/systemd/system", "usr/lib/systemd/system", "etc/gttsplit", "etc/nats"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, aggregatorBin(t), filepath.Join(root, "usr/local/bin/aggregator"), 0o755)
	copyFile(t, collectorBin(t), filepath.Join(root, "usr/local/bin/collector"), 0o755)
	copyFile(t, natsServerBin(t), filepath.Join(root, "usr/local/bin/nats-server"), 0o755)
	// The shell of the NATS unit's guard (ExecStartPre).
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "/bin/sh", filepath.Join(root, "bin/sh"), 0o755)
	found := false
	for _, dir := range systemdUnitDirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.Type().IsRegular() {
				copyFile(t, filepath.Join(dir, e.Name()), filepath.Join(root, "usr/lib/systemd/system", e.Name()), 0o644)
				found = true
			}
		}
		break
	}
	if !found {
		t.Skip("no stock systemd units on this machine (", strings.Join(systemdUnitDirs, ", "), ")")
	}
	sd := filepath.Join(repo(t), "deploy/systemd")
	ents, err := os.ReadDir(sd)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch {
		case strings.HasSuffix(e.Name(), ".service"):
			copyFile(t, filepath.Join(sd, e.Name()), filepath.Join(root, "etc/systemd/system", e.Name()), 0o644)
		case e.Name() == "nats.env":
			copyFile(t, filepath.Join(sd, e.Name()), filepath.Join(root, "etc/nats", e.Name()), 0o600)
		case strings.HasSuffix(e.Name(), ".env"):
			copyFile(t, filepath.Join(sd, e.Name()), filepath.Join(root, "etc/gttsplit", e.Name()), 0o600)
		}
	}
	return root
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// parseUnit reads a unit file's settings (every section together), each
// key with its values in order.
func parseUnit(text string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// unitEnv is what a unit's Environment= lines set.
func unitEnv(u map[string][]string) map[string]string {
	env := map[string]string{}
	for _, v := range u["Environment"] {
		for _, kv := range strings.Fields(v) {
			if k, val, ok := strings.Cut(kv, "="); ok {
				env[k] = val
			}
		}
	}
	return env
}
