package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestSystemdNATSUnit checks the NATS node's unit against what it runs:
// nats.env sets exactly the passwords accounts.conf reads, the unit's
// guard refuses them as shipped (and an empty one, which nats-server
// itself would take) and lets chosen ones pass, nats-server -t accepts
// every node's file with the file's variables, and the unit's state
// directory is where the nodes' JetStream store lives.
func TestSystemdNATSUnit(t *testing.T) {
	u := parseUnit(readFile(t, "deploy/systemd/gttsplit-nats.service"))
	vars := map[string]string{}
	for _, kv := range envFile(t, "deploy/systemd/nats.env") {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	var names []string
	for k := range vars {
		names = append(names, k)
	}
	sort.Strings(names)
	want := accountsEnv(t)
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("nats.env sets %v; accounts.conf reads %v", names, want)
	}

	guard := natsGuard(t)
	chosen := map[string]string{}
	for _, kv := range natsPasswords(t) {
		k, v, _ := strings.Cut(kv, "=")
		chosen[k] = v
	}
	if out, err := guard(vars); err == nil {
		t.Errorf("the guard let nats.env's passwords pass as shipped:\n%s", out)
	} else if !strings.Contains(out, "choose it") {
		t.Errorf("the guard's refusal does not say what to do: %q", out)
	}
	for _, k := range want {
		one := map[string]string{}
		for k2, v := range chosen {
			one[k2] = v
		}
		one[k] = ""
		if _, err := guard(one); err == nil {
			t.Errorf("the guard let an empty %s pass", k)
		}
	}
	if out, err := guard(chosen); err != nil {
		t.Errorf("the guard refused chosen passwords: %v\n%s", err, out)
	}

	// Every node's file with the variables nats.env names, chosen.
	var env []string
	for k, v := range chosen {
		env = append(env, k+"="+v)
	}
	for i := 1; i <= 3; i++ {
		conf := filepath.Join(repo(t), "deploy/nats", "n"+string(rune('0'+i))+".conf")
		if out, code := run(t, env, natsServerBin(t), "-t", "-c", conf); code != 0 {
			t.Errorf("nats-server -t -c %s with nats.env's variables: exit %d\n%s", conf, code, out)
		}
		store := regexp.MustCompile(`(?m)^\s*store_dir:\s*(\S+)`).FindStringSubmatch(readFile(t, "deploy/nats/"+filepath.Base(conf)))
		if store == nil || !strings.HasPrefix(store[1], "/var/lib/"+u["StateDirectory"][0]+"/") {
			t.Errorf("%s: store_dir %v is not under the unit's StateDirectory /var/lib/%s", conf, store, u["StateDirectory"][0])
		}
	}
	if got := u["ExecStart"]; len(got) != 1 || got[0] != "/usr/local/bin/nats-server -c /etc/nats/nats.conf" {
		t.Errorf("ExecStart %v", got)
	}
	if got := u["EnvironmentFile"]; len(got) != 1 || got[0] != "/etc/nats/nats.env" {
		t.Errorf("EnvironmentFile %v", got)
	}
}

// natsGuard returns the NATS unit's ExecStartPre guard as systemd runs it
// ($$ is a $), to run with an environment of its own.
func natsGuard(t testing.TB) func(env map[string]string) (string, error) {
	t.Helper()
	u := parseUnit(readFile(t, "deploy/systemd/gttsplit-nats.service"))
	if len(u["ExecStartPre"]) != 1 {
		t.Fatalf("ExecStartPre: %v", u["ExecStartPre"])
	}
	pre := strings.ReplaceAll(u["ExecStartPre"][0], "$$", "$")
	m := regexp.MustCompile(`^/bin/sh -c '(.*)'$`).FindStringSubmatch(pre)
	if m == nil {
		t.Fatalf("ExecStartPre is not /bin/sh -c '...': %s", pre)
	}
	return func(env map[string]string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", m[1])
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}
