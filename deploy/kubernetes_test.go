package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// k8sTypes are the kinds the manifests may hold, each with the Go type
// of the Kubernetes API it is decoded into.
var k8sTypes = map[string]func() any{
	"apps/v1 Deployment":            func() any { return &appsv1.Deployment{} },
	"v1 Service":                    func() any { return &corev1.Service{} },
	"v1 Secret":                     func() any { return &corev1.Secret{} },
	"v1 ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"policy/v1 PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// k8sManifests are the manifest files (the NATS chart's values are not
// one).
func k8sManifests(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo(t), "deploy/kubernetes/*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if filepath.Base(f) != "nats-values.yaml" {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatal("no manifests in deploy/kubernetes")
	}
	return out
}

// decodeManifests decodes every document of a manifest file strictly
// into its Kubernetes API type: an unknown or misspelt field, a value of
// the wrong type, a duplicate key or an unknown kind is an error.
func decodeManifests(data []byte) ([]any, error) {
	var out []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		newObj, ok := k8sTypes[tm.APIVersion+" "+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("document %d: unknown kind %q %q", i+1, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i+1, tm.Kind, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// k8sObjects decodes every manifest of deploy/kubernetes.
func k8sObjects(t testing.TB) []any {
	t.Helper()
	var all []any
	for _, f := range k8sManifests(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifests(b)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		all = append(all, objs...)
	}
	return all
}

// TestKubernetesManifestsDecode decodes every manifest strictly, and shows
// that the decoding catches a misspelt field, a wrong type and an unknown
// kind.
func TestKubernetesManifestsDecode(t *testing.T) {
	objs := k8sObjects(t)
	t.Logf("%d objects", len(objs))
	agg := readFile(t, "deploy/kubernetes/aggregator.yaml")
	for name, broken := range map[string]string{
		"misspelt field": strings.Replace(agg, "replicas: 3", "replica: 3", 1),
		"wrong type":     strings.Replace(agg, "replicas: 3", "replicas: three", 1),
		"unknown kind":   strings.Replace(agg, "kind: Service", "kind: Servic", 1),
		"probe field":    strings.Replace(agg, "periodSeconds: 5", "periodSecond: 5", 1),
	} {
		if broken == agg {
			t.Fatalf("the %s case changed nothing: update it with aggregator.yaml", name)
		}
		if _, err := decodeManifests([]byte(broken)); err == nil {
			t.Errorf("a %s decoded", name)
		}
	}
}

// TestKubernetesAggregator holds the aggregator's Deployment to what the
// binary does: 3 replicas, the probes on its listener's port, a grace
// period longer than the drain, and the secrets it reads present in the
// Secret.
func TestKubernetesAggregator(t *testing.T) {
	objs := k8sObjects(t)
	secrets := secretKeys(objs)
	var dep *appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == "gttsplit-aggregator" {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("no Deployment gttsplit-aggregator")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	env := containerEnv(t, c, secrets)
	_, port, _ := strings.Cut(env["GTTSPLIT_HTTP_LISTEN"], ":")
	named := map[string]string{}
	for _, p := range c.Ports {
		named[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil {
			t.Fatalf("the container needs an HTTP %s probe", want)
		}
		if probe.HTTPGet.Path != want {
			t.Errorf("probe path %s, want %s", probe.HTTPGet.Path, want)
		}
		if p := probe.HTTPGet.Port.String(); p != port && named[p] != port {
			t.Errorf("%s probe on port %s, the aggregator listens on %s", want, p, port)
		}
	}
	drain, err := time.ParseDuration(env["GTTSPLIT_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("GTTSPLIT_SHUTDOWN_TIMEOUT: %v", err)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drain {
		t.Errorf("terminationGracePeriodSeconds %v does not outlast shutdown_timeout %v", g, drain)
	}
	if env["GTTSPLIT_HTTP_TOKEN"] == "" {
		t.Error("off loopback the page needs http.token: GTTSPLIT_HTTP_TOKEN from the Secret")
	}
}

// TestKubernetesCollector holds the llama-server pod to the collector's
// needs: the collector is the entrypoint (collector run -- llama-server),
// its binary is put there by the init container, a GPU is asked for, the
// grace period covers the kill grace and the flush.
func TestKubernetesCollector(t *testing.T) {
	objs := k8sObjects(t)
	secrets := secretKeys(objs)
	found := false
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok || d.Name == "gttsplit-aggregator" {
			continue
		}
		found = true
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		if len(c.Command) < 4 || filepath.Base(c.Command[0]) != "collector" || c.Command[1] != "run" || c.Command[2] != "--" ||
			!strings.Contains(c.Command[3], "llama-server") {
			t.Errorf("%s: the entrypoint is not `collector run -- llama-server ...`: %q", d.Name, c.Command)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || strings.HasPrefix(c.Command[0], m.MountPath+"/")
		}
		if !mounted || len(pod.InitContainers) == 0 {
			t.Errorf("%s: no init container puts %s in a mounted volume", d.Name, c.Command[0])
		}
		if _, ok := c.Resources.Limits["amd.com/gpu"]; !ok {
			t.Errorf("%s: no GPU asked for", d.Name)
		}
		env := containerEnv(t, c, secrets)
		var drain time.Duration
		for _, k := range []string{"GTTSPLIT_SHUTDOWN_TIMEOUT", "GTTSPLIT_WRAP_KILL_GRACE"} {
			v, err := time.ParseDuration(env[k])
			if err != nil {
				t.Fatalf("%s: %s: %v", d.Name, k, err)
			}
			drain += v
		}
		if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drain {
			t.Errorf("%s: terminationGracePeriodSeconds %v does not outlast kill grace + shutdown_timeout %v", d.Name, g, drain)
		}
	}
	if !found {
		t.Fatal("no llama-server Deployment")
	}
}

// secretKeys are the keys of every Secret, by Secret name.
func secretKeys(objs []any) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, o := range objs {
		if s, ok := o.(*corev1.Secret); ok {
			out[s.Name] = map[string]bool{}
			for k := range s.StringData {
				out[s.Name][k] = true
			}
			for k := range s.Data {
				out[s.Name][k] = true
			}
		}
	}
	return out
}

// containerEnv is a container's environment, a value from a Secret as
// "secret:<name>/<key>" (the key must be in the Secret's manifest), from
// a field as "field:<path>".
func containerEnv(t testing.TB, c corev1.Container, secrets map[string]map[string]bool) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			if !secrets[r.Name][r.Key] {
				t.Errorf("container %s: %s reads %s/%s, which secret.yaml does not have", c.Name, e.Name, r.Name, r.Key)
			}
			env[e.Name] = "secret:" + r.Name + "/" + r.Key
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		default:
			t.Errorf("container %s: %s: a source the test does not know", c.Name, e.Name)
		}
	}
	return env
}

// natsValues is the part of the NATS chart's values this deployment sets.
type natsValues struct {
	Config struct {
		Cluster struct {
			Enabled  bool `json:"enabled"`
			Replicas int  `json:"replicas"`
		} `json:"cluster"`
		JetStream struct {
			Enabled   bool `json:"enabled"`
			FileStore struct {
				PVC struct {
					Size string `json:"size"`
				} `json:"pvc"`
			} `json:"fileStore"`
		} `json:"jetstream"`
		Merge map[string]any `json:"merge"`
	} `json:"config"`
	Container struct {
		// The chart takes a value or a source; these are all sources.
		Env map[string]struct {
			ValueFrom *corev1.EnvVarSource `json:"valueFrom"`
		} `json:"env"`
	} `json:"container"`
}

// TestNATSHelmValues checks the values for the official NATS chart: a
// 3-node cluster with JetStream; config.merge rendered as the chart does
// (a "<< x >>" string unquoted, a "$include" key an include directive)
// into a configuration beside accounts.conf that `nats-server -t` accepts;
// max_payload at least 1 MB; and every password accounts.conf reads set
// from a key the Secret has.
func TestNATSHelmValues(t *testing.T) {
	var v natsValues
	if err := yaml.UnmarshalStrict([]byte(readFile(t, "deploy/kubernetes/nats-values.yaml")), &v); err != nil {
		t.Fatalf("nats-values.yaml: %v", err)
	}
	if !v.Config.Cluster.Enabled || v.Config.Cluster.Replicas != 3 {
		t.Errorf("cluster %+v, want enabled with 3 replicas", v.Config.Cluster)
	}
	if !v.Config.JetStream.Enabled {
		t.Error("JetStream is not enabled")
	}
	// The chart's own part of nats.conf (what its templates write for
	// these values), then the merge.
	dir := t.TempDir()
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "server_name: n1\nport: 4222\nhttp_port: 8222\njetstream { store_dir: %q, max_file_store: %s }\n",
		filepath.Join(dir, "store"), v.Config.JetStream.FileStore.PVC.Size)
	fmt.Fprintf(&conf, "cluster { name: nats, port: 6222, routes: [nats://nats-0.nats-headless:6222, nats://nats-1.nats-headless:6222, nats://nats-2.nats-headless:6222] }\n")
	payload := ""
	for k, val := range v.Config.Merge {
		s := fmt.Sprint(val)
		if m := regexp.MustCompile(`^<<\s*(.*?)\s*>>$`).FindStringSubmatch(s); m != nil {
			s = m[1]
		} else {
			s = fmt.Sprintf("%q", s)
		}
		if strings.HasSuffix(k, "$include") {
			fmt.Fprintf(&conf, "include %s\n", strings.Trim(s, `"`))
			continue
		}
		if k == "max_payload" {
			payload = s
		}
		fmt.Fprintf(&conf, "%s: %s\n", k, s)
	}
	if n, err := natsSize(payload); err != nil || n < 1<<20 {
		t.Errorf("max_payload %q: want at least 1 MB (%v)", payload, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(readFile(t, "deploy/nats/accounts.conf")), 0o644); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(f, conf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, natsPasswords(t), natsServerBin(t), "-t", "-c", f); code != 0 {
		t.Errorf("nats-server -t on the chart's configuration: exit %d\n%s\n%s", code, out, conf.Bytes())
	}
	secrets := secretKeys(k8sObjects(t))
	for _, name := range accountsEnv(t) {
		src, ok := v.Container.Env[name]
		if !ok || src.ValueFrom == nil || src.ValueFrom.SecretKeyRef == nil {
			t.Errorf("container.env does not set %s from a Secret", name)
			continue
		}
		if r := src.ValueFrom.SecretKeyRef; !secrets[r.Name][r.Key] {
			t.Errorf("%s reads %s/%s, which secret.yaml does not have", name, r.Name, r.Key)
		}
	}
}
