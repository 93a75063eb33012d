package deploy

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// firstMile returns the command lines of the code blocks of docs/deploy.md's
// "From nothing to a running fleet" (continuation lines joined), and the
// section's text.
func firstMile(t *testing.T) ([]string, string) {
	t.Helper()
	doc := readFile(t, "docs/deploy.md")
	i := strings.Index(doc, "\n## From nothing to a running fleet\n")
	if i < 0 {
		t.Fatal("docs/deploy.md lost its section 'From nothing to a running fleet'")
	}
	sec := doc[i+1:]
	sec = sec[:strings.Index(sec[3:], "\n## ")+3]
	var lines []string
	in, cur := false, ""
	for _, l := range strings.Split(sec, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "```sh"):
			in = true
			continue
		case strings.HasPrefix(l, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if c, ok := strings.CutSuffix(l, "\\"); ok {
			cur += c
			continue
		}
		l = cur + l
		cur = ""
		if before, _, ok := strings.Cut(l, " #"); ok {
			l = before
		}
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return lines, sec
}

// TestFirstMile holds docs/deploy.md's path from nothing to a running
// fleet to the repository: every package its go build and go install lines
// name exists (nats-server at go.mod's version), every file it installs is
// in the repository or built by its first step, every unit it starts is
// in deploy/systemd, it validates the environment files it installs, and
// it ends with `collector check` of the aggregators.
func TestFirstMile(t *testing.T) {
	lines, sec := firstMile(t)
	if len(lines) < 15 {
		t.Fatalf("only %d command lines: %q", len(lines), lines)
	}
	root := repo(t)
	goMod := readFile(t, "go.mod")
	built := map[string]bool{}
	made := map[string]bool{} // files a line before writes with "> FILE"
	var check string
	for _, l := range lines {
		if m := regexp.MustCompile(`> (\S+)$`).FindStringSubmatch(l); m != nil {
			made[m[1]] = true
		}
		// "(set -a; . FILE; collector validate)": the command after the last ";".
		f := strings.Fields(strings.Trim(l, "()"))
		if j := strings.LastIndex(l, "; "); j >= 0 {
			f = strings.Fields(strings.Trim(l[j+2:], "()"))
		}
		for len(f) > 0 && strings.Contains(f[0], "=") {
			f = f[1:] // VAR=value before a command
		}
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "go" && (f[1] == "build" || f[1] == "install"):
			for _, p := range f[2:] {
				if strings.HasPrefix(p, "-") || p == "bin/" {
					continue
				}
				pkg, version, _ := strings.Cut(p, "@")
				if strings.HasPrefix(pkg, "github.com/nats-io/nats-server/v2") && f[1] == "install" &&
					!strings.Contains(goMod, "github.com/nats-io/nats-server/v2 "+version+"\n") {
					t.Errorf("%q installs nats-server %s; go.mod has another version", l, version)
				}
				cmd := exec.Command("go", "list", pkg)
				cmd.Dir = root
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%q: go list %s: %v\n%s", l, pkg, err, out)
				}
				name := path.Base(pkg)
				if regexp.MustCompile(`^v[0-9]+$`).MatchString(name) {
					name = path.Base(path.Dir(pkg))
				}
				built[name] = true
			}
		case f[0] == "install":
			var args []string
			for k := 1; k < len(f); k++ {
				switch {
				case f[k] == "-m":
					k++
				case strings.HasPrefix(f[k], "-"):
				default:
					args = append(args, f[k])
				}
			}
			for _, src := range args[:len(args)-1] {
				if b, ok := strings.CutPrefix(src, "bin/"); ok {
					if !built[b] {
						t.Errorf("%q installs %s, which no go build line before it makes", l, src)
					}
					continue
				}
				if made[src] {
					continue
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%q installs %s: %v", l, src, err)
				}
			}
		case f[0] == "systemctl":
			unit := f[len(f)-1]
			if at := strings.Index(unit, "@"); at >= 0 {
				unit = unit[:at+1]
			}
			if _, err := os.Stat(filepath.Join(root, "deploy/systemd", unit+".service")); err != nil {
				t.Errorf("%q starts %s: %v", l, f[len(f)-1], err)
			}
		case f[0] == "collector" && len(f) > 1 && f[1] == "check":
			check = l
		}
	}
	for _, want := range []string{"aggregator validate", "collector validate", "systemctl enable --now gttsplit-nats", "systemctl enable --now gttsplit-aggregator"} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("the steps never run %q", want)
		}
	}
	if check == "" {
		t.Fatal("the steps do not end with collector check")
	}
	// The check's line parses: it asks for the broker only (no URL here).
	f := strings.Fields(check[strings.Index(check, "collector check"):])
	cmd := exec.Command(collectorBin(t), append(f[1:], "--timeout", "1s")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "set --nats-url") {
		t.Errorf("%s without a broker: %v\n%s", check, err, out)
	}
	// The output the section shows is the check's.
	for _, want := range []string{"1. http://agg-1:8080/readyz: ready", "3. partitions: 16 owned, shared by 2 members", "the fleet works: 2 aggregators ready"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the section does not show the check's line %q", want)
		}
	}
}

// TestFirstMileUsers runs the section's lines that write the NATS users
// and their passwords, as printed, in a directory laid out as a clone: the
// accounts file is the generator's for the hosts the line names, nats.env
// sets exactly the passwords that file reads (every one the section names
// among them), each chosen (the unit's guard lets them pass), and every
// node's configuration is accepted by nats-server -t with them.
func TestFirstMileUsers(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl for the password line")
	}
	lines, sec := firstMile(t)
	var users, passwords string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "bin/aggregator nats-users "):
			users = l
		case strings.HasSuffix(l, "> nats.env"):
			passwords = l
		}
	}
	if users == "" || passwords == "" {
		t.Fatalf("the steps do not write the users (bin/aggregator nats-users ...) and nats.env: %q", lines)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(aggregatorBin(t), filepath.Join(dir, "bin", "aggregator")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "deploy", "nats"), os.DirFS(filepath.Join(repo(t), "deploy", "nats"))); err != nil {
		t.Fatal(err)
	}
	sh := func(line string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", line)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
	}
	sh(users)
	sh(passwords)

	accounts := readFile(t, filepath.Join(dir, "deploy/nats/accounts.conf"))
	hosts := strings.Fields(strings.TrimPrefix(users[:strings.Index(users, " >")], "bin/aggregator nats-users "))
	for _, h := range hosts {
		if !strings.Contains(accounts, `{ user: "`+h+`", password: $NATS_`) {
			t.Errorf("the accounts file %s wrote has no user %s", users, h)
		}
	}
	var want []string
	for _, m := range regexp.MustCompile(`\$(NATS_[A-Z0-9_]+)`).FindAllStringSubmatch(accounts, -1) {
		if !slices.Contains(want, m[1]) {
			want = append(want, m[1])
		}
	}
	env := envFile(t, filepath.Join(dir, "nats.env"))
	vars := map[string]string{}
	var names []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
		names = append(names, k)
	}
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("nats.env sets %v; the accounts file reads %v", names, want)
	}
	for _, v := range regexp.MustCompile(`NATS_[A-Z0-9_]+_PASSWORD`).FindAllString(sec, -1) {
		if _, ok := vars[v]; !ok {
			t.Errorf("the section names %s, which the accounts file of its hosts does not read", v)
		}
	}
	if out, err := natsGuard(t)(vars); err != nil {
		t.Errorf("the unit's guard refuses the passwords the section chose: %v\n%s", err, out)
	}
	for i := 1; i <= 3; i++ {
		conf := filepath.Join(dir, "deploy/nats", "n"+string(rune('0'+i))+".conf")
		if out, code := run(t, env, natsServerBin(t), "-t", "-c", conf); code != 0 {
			t.Errorf("nats-server -t -c n%d.conf with the section's accounts file and nats.env: exit %d\n%s", i, code, out)
		}
	}
}
