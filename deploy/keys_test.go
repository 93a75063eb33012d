package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The binaries ignore a GTTSPLIT_* variable that is no key (viper reads
// only the variables of the keys it knows, so `validate` cannot tell a
// misspelt or renamed one). The keys' variables are therefore read from
// configs/<binary>.yaml, which internal/config generates and its tests
// keep in sync with the code: each key's comment names its variable(s).
// `validate` then checks the values the deploy files give them.

var envVarRE = regexp.MustCompile(`GTTSPLIT_[A-Z0-9_]+`)

// binaryVars are the environment variables of a binary's keys.
func binaryVars(t testing.TB, binary string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range strings.Split(readFile(t, "configs/"+binary+".yaml"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			for _, v := range envVarRE.FindAllString(line, -1) {
				out[v] = true
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("configs/%s.yaml names only %d variables", binary, len(out))
	}
	return out
}

// deployEnv is what one deployed program gets: its binary, where it is
// set, and its GTTSPLIT_* variables with the values the files give
// (a Secret's as "x", a field's as a host name, compose's ${VAR:-default}
// as the default, systemd's specifiers expanded).
type deployEnv struct {
	where  string
	binary string
	vars   map[string]string
}

// deployEnvs collects every program's environment from the deploy files.
func deployEnvs(t testing.TB) []deployEnv {
	t.Helper()
	var out []deployEnv
	only := func(kv map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range kv {
			if strings.HasPrefix(k, "GTTSPLIT_") {
				m[k] = v
			}
		}
		return m
	}
	fileVars := func(rel string) map[string]string {
		m := map[string]string{}
		for _, kv := range envFile(t, rel) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	specifiers := strings.NewReplacer("%S", "/var/lib", "%i", "gpu0", "%%", "%")
	unitVars := func(rel string) map[string]string {
		m := unitEnv(parseUnit(readFile(t, rel)))
		for k, v := range m {
			m[k] = specifiers.Replace(v)
		}
		return m
	}

	// systemd: the unit's Environment= and its EnvironmentFile=s.
	out = append(out, deployEnv{"deploy/systemd/gttsplit-aggregator.service + aggregator.env", "aggregator",
		only(merge(fileVars("deploy/systemd/aggregator.env"), unitVars("deploy/systemd/gttsplit-aggregator.service")))})
	lanes, _ := filepath.Glob(filepath.Join(repo(t), "deploy/systemd/collector-*.env"))
	if len(lanes) == 0 {
		t.Fatal("no deploy/systemd/collector-<lane>.env")
	}
	for _, lane := range lanes {
		rel := "deploy/systemd/" + filepath.Base(lane)
		out = append(out, deployEnv{"deploy/systemd/gttsplit-collector@.service + collector.env + " + filepath.Base(lane), "collector",
			only(merge(fileVars("deploy/systemd/collector.env"), fileVars(rel), unitVars("deploy/systemd/gttsplit-collector@.service")))})
	}

	// Kubernetes: every container of every Deployment that runs a binary.
	for _, e := range k8sPrograms(t, k8sObjects(t)) {
		for k, v := range e.vars {
			switch {
			case strings.HasPrefix(v, "secret:"):
				e.vars[k] = "x"
			case strings.HasPrefix(v, "field:"):
				e.vars[k] = "strix01" // spec.nodeName
			}
		}
		e.vars = only(e.vars)
		out = append(out, e)
	}

	// Compose: every service that runs a binary.
	for name, s := range readCompose(t).Services {
		if b := composeBinary(s); b != "" {
			vars := map[string]string{}
			for k, v := range s.Environment {
				vars[k] = interpolate(v)
			}
			out = append(out, deployEnv{composeFile + " " + name, b, only(vars)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

// unknownVars are the variables of env that are no key of its binary.
func unknownVars(env deployEnv, known map[string]bool) []string {
	var bad []string
	for k := range env.vars {
		if !known[k] {
			bad = append(bad, k)
		}
	}
	sort.Strings(bad)
	return bad
}

// TestDeployKeysAreKeys fails when a deploy file sets a GTTSPLIT_*
// variable that is no key of the binary it runs (a key renamed in the
// code changes configs/*.yaml, and this test fails), and runs `validate`
// with each program's variables to check their values.
func TestDeployKeysAreKeys(t *testing.T) {
	known := map[string]map[string]bool{"aggregator": binaryVars(t, "aggregator"), "collector": binaryVars(t, "collector")}
	bins := map[string]string{"aggregator": aggregatorBin(t), "collector": collectorBin(t)}
	for _, env := range deployEnvs(t) {
		if len(env.vars) == 0 {
			t.Errorf("%s: sets no GTTSPLIT_* variable", env.where)
		}
		if bad := unknownVars(env, known[env.binary]); len(bad) > 0 {
			t.Errorf("%s: %s: no key of the %s (configs/%s.yaml)", env.where, strings.Join(bad, ", "), env.binary, env.binary)
		}
		// The shipped placeholders are refused (TestDeployPlaceholdersRefused):
		// the values are checked as an operator would have chosen them.
		if out, code := validate(t, bins[env.binary], chosen(t, bins[env.binary], env.vars)); code != 0 {
			t.Errorf("%s: %s validate: exit %d\n%s", env.where, env.binary, code, out)
		}
	}
}

// TestDeployNamesOnlyKeys looks for GTTSPLIT_* names anywhere in deploy/
// and docs/deploy.md (comments, docs, examples): each must be a key's
// variable of one binary. Stream and bucket names are not variables.
func TestDeployNamesOnlyKeys(t *testing.T) {
	known := binaryVars(t, "aggregator")
	for k := range binaryVars(t, "collector") {
		known[k] = true
	}
	notVars := map[string]bool{"GTTSPLIT_RUNS": true, "GTTSPLIT_MEMBERS": true, "GTTSPLIT_PARTS": true}
	// Preceded by a letter, digit, '_', '.' or '$' it is part of a stream
	// or subject name (KV_GTTSPLIT_RUNS, $KV.GTTSPLIT_RUNS).
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_.$])(GTTSPLIT_[A-Z0-9_]+)`)
	files := []string{filepath.Join(repo(t), "docs/deploy.md")}
	err := filepath.WalkDir(filepath.Join(repo(t), "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".sum") && !strings.HasSuffix(p, ".mod") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if !known[m[2]] && !notVars[m[2]] {
				rel, _ := filepath.Rel(repo(t), f)
				t.Errorf("%s names %s, which is no key's variable", rel, m[2])
			}
		}
	}
}

// TestKeyChecksCatchMistakes shows both checks fail when they must: a
// renamed variable is unknown, and validate refuses a bad value.
func TestKeyChecksCatchMistakes(t *testing.T) {
	known := binaryVars(t, "aggregator")
	env := deployEnv{"case", "aggregator", map[string]string{"GTTSPLIT_NATS_URLS": "nats://x:4222"}}
	if bad := unknownVars(env, known); len(bad) != 1 {
		t.Errorf("GTTSPLIT_NATS_URLS not reported: %v", bad)
	}
	if _, code := validate(t, aggregatorBin(t), map[string]string{"GTTSPLIT_NATS_REPLICAS": "9"}); code != 2 {
		t.Errorf("validate took nats.replicas 9: exit %d", code)
	}
}

// validate runs `<binary> validate` with only vars in its environment
// (and PATH, HOME), from an empty directory.
func validate(t testing.TB, bin string, vars map[string]string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, "validate")
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + cmd.Dir}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s", k, v))
	}
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(b), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), 0
}

// k8sPrograms is every container of every Deployment of objs that runs a
// binary, with its environment as containerEnv gives it (a Secret's value
// as "secret:<name>/<key>", a field's as "field:<path>").
func k8sPrograms(t testing.TB, objs []any) []deployEnv {
	t.Helper()
	var out []deployEnv
	secrets := secretKeys(objs)
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			argv := append(append([]string{}, c.Command...), c.Args...)
			if len(argv) == 0 {
				continue
			}
			binary := filepath.Base(argv[0])
			if binary != "aggregator" && binary != "collector" {
				continue
			}
			out = append(out, deployEnv{"deploy/kubernetes " + d.Name + "/" + c.Name, binary, containerEnv(t, c, secrets)})
		}
	}
	return out
}
