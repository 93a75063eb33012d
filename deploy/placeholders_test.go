package deploy

import (
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// placeholderLine is validate's line for a secret left at a shipped
// placeholder; it names the secret's variables.
var placeholderLine = regexp.MustCompile(`(?m)^[a-z_.]+: ".*" is the placeholder the deploy files ship, not a secret: choose one \(([A-Z0-9_ ]+(?: or [A-Z0-9_]+)*)\)$`)

// refused runs validate with vars and returns the variables of vars it
// refuses as placeholders.
func refused(t testing.TB, bin string, vars map[string]string) []string {
	t.Helper()
	out, _ := validate(t, bin, vars)
	var got []string
	for _, m := range placeholderLine.FindAllStringSubmatch(out, -1) {
		for _, v := range strings.Split(m[1], " or ") {
			if _, ok := vars[v]; ok {
				got = append(got, v)
			}
		}
	}
	sort.Strings(got)
	return got
}

// secretVars are the variables of vars that set a secret: those validate
// refuses when every one of them holds a placeholder.
func secretVars(t testing.TB, bin string, vars map[string]string) map[string]bool {
	t.Helper()
	all := map[string]string{}
	for k := range vars {
		all[k] = "change-me"
	}
	out := map[string]bool{}
	for _, v := range refused(t, bin, all) {
		out[v] = true
	}
	return out
}

// chosen is vars with every secret that holds a placeholder replaced by a
// value an operator would choose.
func chosen(t testing.TB, bin string, vars map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range vars {
		out[k] = v
	}
	for _, v := range refused(t, bin, vars) {
		out[v] = "Zk3-" + strings.ToLower(v) + "-chosen"
	}
	return out
}

// TestDeployPlaceholdersRefused: every secret the systemd environment
// files and the Kubernetes Secret ship with a value holds a placeholder,
// and `validate` refuses each of them by name, so a deployment that was
// never given its own secrets does not start.
func TestDeployPlaceholdersRefused(t *testing.T) {
	bins := map[string]string{"aggregator": aggregatorBin(t), "collector": collectorBin(t)}
	check := func(where, binary string, vars map[string]string) {
		t.Helper()
		secrets := secretVars(t, bins[binary], vars)
		if len(secrets) == 0 {
			// Every program here has a NATS password at least.
			t.Errorf("%s: %s validate refuses none of its variables as a placeholder, not even each set to change-me", where, binary)
		}
		var want []string
		for k := range secrets {
			if vars[k] != "" {
				want = append(want, k)
			}
		}
		sort.Strings(want)
		if len(want) == 0 {
			return
		}
		got := refused(t, bins[binary], vars)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %s validate refused %v as placeholders; the secrets shipped with a value are %v", where, binary, got, want)
		}
	}
	n := 0
	for _, env := range deployEnvs(t) {
		if strings.HasPrefix(env.where, "deploy/systemd") {
			check(env.where, env.binary, env.vars)
			n++
		}
	}
	// Kubernetes: the containers' variables from the Secret, with the
	// values secret.yaml ships.
	objs := k8sObjects(t)
	values := map[string]string{}
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			for k, v := range s.StringData {
				values["secret:"+s.Name+"/"+k] = v
			}
		}
	}
	for _, e := range k8sPrograms(t, objs) {
		for k, v := range e.vars {
			switch {
			case strings.HasPrefix(v, "secret:"):
				e.vars[k] = values[v]
			case strings.HasPrefix(v, "field:"):
				e.vars[k] = "strix01"
			}
		}
		check(e.where, e.binary, e.vars)
		n++
	}
	if n < 3 {
		t.Fatalf("only %d programs checked", n)
	}
}
