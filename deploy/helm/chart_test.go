package helm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/kubelet/kubetest"
)

const (
	chartDir     = "flowlb"
	valuesDir    = "values"
	kustomizeDir = "../kubernetes"
	// The namespace deploy/kubernetes puts everything in; the chart puts
	// everything in the release's.
	namespace = "flowlb-system"
)

// tools returns the pinned helm and kubectl (whose kustomize renders
// deploy/kubernetes), skipping without them unless FLOWLB_REQUIRE_KUBE=1.
func tools(t *testing.T) (helm, kubectl string) {
	t.Helper()
	helm, kubectl = Binary(), filepath.Join(lab.KubeBinDir(), "kubectl")
	var missing []string
	for _, p := range []string{helm, kubectl} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		if kubetest.Required() {
			t.Fatalf("%s=1 but %s missing (hack/helm-bins.sh, hack/kube-bins.sh; make deps-test)", kubetest.RequireEnv, strings.Join(missing, ", "))
		}
		t.Skipf("%s missing (hack/helm-bins.sh, hack/kube-bins.sh); set %s=1 to fail instead", strings.Join(missing, ", "), kubetest.RequireEnv)
	}
	return helm, kubectl
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// object is one decoded manifest.
type object = map[string]any

func decode(t *testing.T, what string, b []byte) []object {
	t.Helper()
	var out []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if len(o) > 0 {
			out = append(out, o)
		}
	}
	return out
}

func str(o object, path ...string) string {
	v, _ := get(o, path...).(string)
	return v
}

func get(o object, path ...string) any {
	var v any = o
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func key(o object) string {
	return fmt.Sprintf("%s %s/%s", str(o, "kind"), str(o, "metadata", "namespace"), str(o, "metadata", "name"))
}

// helmLabels are the labels the chart adds to every object's metadata
// (Helm's standard ones) beside kustomize's part-of.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// checksumAnnotation rolls a workload's pods when the ConfigMap changes,
// what kustomize's hashed ConfigMap name does.
const checksumAnnotation = "checksum/config"

// configMapName is the chart's ConfigMap; kustomize's carries a hash of
// its content after it.
const configMapName = "flowlb-config"

// normalizeKustomize drops what the chart legitimately renders otherwise:
// the Namespace (Helm's release namespace is made by `helm install
// --create-namespace`, not owned by the chart, or helm uninstall would
// delete the namespace the release record lives in), and the ConfigMap's
// content hash, in its name and every reference to it (the chart's pods
// roll through checksumAnnotation instead).
func normalizeKustomize(t *testing.T, objs []object) map[string]object {
	t.Helper()
	hashed := ""
	for _, o := range objs {
		if str(o, "kind") == "ConfigMap" && strings.HasPrefix(str(o, "metadata", "name"), configMapName+"-") {
			hashed = str(o, "metadata", "name")
		}
	}
	if hashed == "" {
		t.Fatalf("kustomize rendered no ConfigMap %s-<hash>", configMapName)
	}
	out := map[string]object{}
	for _, o := range objs {
		if str(o, "kind") == "Namespace" {
			if str(o, "metadata", "name") != namespace {
				t.Errorf("kustomize renders namespace %s, want %s", str(o, "metadata", "name"), namespace)
			}
			continue
		}
		o = replaceStrings(o, hashed, configMapName).(object)
		out[key(o)] = o
	}
	return out
}

// normalizeHelm drops the chart's own labels and checksumAnnotation
// (checking that a pod template has it exactly when it reads the
// ConfigMap, as a kustomize pod template names the hashed ConfigMap
// exactly then).
func normalizeHelm(t *testing.T, objs []object) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, o := range objs {
		if labels, ok := get(o, "metadata", "labels").(map[string]any); ok {
			for _, l := range helmLabels {
				if _, ok := labels[l]; !ok {
					t.Errorf("chart's %s lacks label %s", key(o), l)
				}
				delete(labels, l)
			}
		}
		if ann, ok := get(o, "spec", "template", "metadata", "annotations").(map[string]any); ok {
			_, has := ann[checksumAnnotation]
			delete(ann, checksumAnnotation)
			if reads := readsConfigMap(get(o, "spec", "template")); has != reads {
				t.Errorf("chart's %s: pod template has %s: %v, reads ConfigMap %s: %v", key(o), checksumAnnotation, has, configMapName, reads)
			}
		}
		k := key(o)
		if _, dup := out[k]; dup {
			t.Errorf("chart renders %s twice", k)
		}
		out[k] = o
	}
	return out
}

// replaceStrings returns v with every string equal to from replaced by to.
func replaceStrings(v any, from, to string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = replaceStrings(e, from, to)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = replaceStrings(e, from, to)
		}
		return v
	case string:
		if v == from {
			return to
		}
	}
	return v
}

// readsConfigMap says whether a pod template refers to the ConfigMap.
func readsConfigMap(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["configMapKeyRef"].(map[string]any); ok && ref["name"] == configMapName {
			return true
		}
		for _, e := range v {
			if readsConfigMap(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if readsConfigMap(e) {
				return true
			}
		}
	}
	return false
}

// renderKustomize renders a kustomization directory.
func renderKustomize(t *testing.T, kubectl, dir string) map[string]object {
	t.Helper()
	return normalizeKustomize(t, decode(t, "kubectl kustomize "+dir, run(t, kubectl, "kustomize", dir)))
}

// renderHelm renders the chart with the values files and --set flags.
func renderHelm(t *testing.T, helm string, values []string, set ...string) map[string]object {
	t.Helper()
	args := []string{"template", "flowlb", chartDir, "--namespace", namespace}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return normalizeHelm(t, decode(t, "helm "+strings.Join(args, " "), run(t, helm, args...)))
}

// compare reports every object one side renders and the other does not,
// and every difference of the objects both render.
func compare(t *testing.T, kustomize, chart map[string]object) {
	t.Helper()
	if len(kustomize) == 0 {
		t.Error("nothing rendered")
	}
	for _, k := range differences(kustomize, chart) {
		want, inK := kustomize[k]
		got, inH := chart[k]
		switch {
		case !inH:
			t.Errorf("kustomize renders %s, the chart does not", k)
		case !inK:
			t.Errorf("the chart renders %s, kustomize does not", k)
		default:
			t.Errorf("%s differs (-kustomize +chart):\n%s", k, cmp.Diff(want, got))
		}
	}
}

// differences lists the objects that differ or that one side lacks.
func differences(kustomize, chart map[string]object) []string {
	var out []string
	for k, want := range kustomize {
		if got, ok := chart[k]; !ok || !reflect.DeepEqual(want, got) {
			out = append(out, k)
		}
	}
	for k := range chart {
		if _, ok := kustomize[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// chartCase is a kustomization and the chart values that render the same.
type chartCase struct {
	name      string
	kustomize string   // a kustomization directory
	values    []string // values files, in order
	set       []string // --set flags
}

// overlayCases pairs the base and every overlay of deploy/kubernetes with
// its values file in deploy/helm/values (values/NAME.yaml for
// overlays/NAME): an overlay without values, or values without an
// overlay, fails the test.
func overlayCases(t *testing.T) []chartCase {
	t.Helper()
	cases := []chartCase{{name: "base", kustomize: kustomizeDir}}
	overlays, err := os.ReadDir(filepath.Join(kustomizeDir, "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, o := range overlays {
		if !o.IsDir() {
			continue
		}
		have[o.Name()] = true
		v := filepath.Join(valuesDir, o.Name()+".yaml")
		if _, err := os.Stat(v); err != nil {
			t.Errorf("overlays/%s has no values file %s: the chart must render what each overlay renders", o.Name(), v)
			continue
		}
		cases = append(cases, chartCase{name: o.Name(), kustomize: filepath.Join(kustomizeDir, "overlays", o.Name()), values: []string{v}})
	}
	values, err := filepath.Glob(filepath.Join(valuesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if name := strings.TrimSuffix(filepath.Base(v), ".yaml"); !have[name] {
			t.Errorf("%s has no overlay %s/overlays/%s", v, kustomizeDir, name)
		}
	}
	if len(cases) < 2 {
		t.Fatalf("no overlays found in %s/overlays", kustomizeDir)
	}
	return cases
}

// combinedCase composes what no single overlay does: overlays/postgres
// with the eBPF and kube-api components and a LoadBalancer range in one
// kustomization, against the chart's values files given together (as a
// user composes them) and --set.
func combinedCase(t *testing.T) chartCase {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(kustomizeDir)
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes other kustomizations by relative paths only.
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %[1]s/overlays/postgres
components:
  - %[1]s/components/ebpf
  - %[1]s/components/kube-api
configMapGenerator:
  - name: flowlb-config
    behavior: merge
    literals:
      - external-cidr=198.19.128.0/17
      - kubernetes-service-host=198.18.0.250
      - kubernetes-service-port=6443
images:
  - name: flowlb
    newName: registry.example/flowlb
    newTag: v9
`, rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return chartCase{
		name:      "postgres+ebpf+kube-api+external-vip-range",
		kustomize: dir,
		values:    []string{filepath.Join(valuesDir, "postgres.yaml"), filepath.Join(valuesDir, "ebpf.yaml"), filepath.Join(valuesDir, "external-vip-range.yaml")},
		set:       []string{"kubernetesAPI.host=198.18.0.250", "kubernetesAPI.port=6443", "image.repository=registry.example/flowlb", "image.tag=v9"},
	}
}

// TestChartMatchesKustomize: for the base, every overlay of
// deploy/kubernetes and a composition of them, `helm template` of the
// chart with the matching values renders the same objects as `kubectl
// kustomize`, field for field, but for what normalizeKustomize and
// normalizeHelm say differs by design (the Namespace, the ConfigMap's
// hash, Helm's labels and checksum annotation).
func TestChartMatchesKustomize(t *testing.T) {
	helm, kubectl := tools(t)
	cases := append(overlayCases(t), combinedCase(t))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			compare(t, renderKustomize(t, kubectl, c.kustomize), renderHelm(t, helm, c.values, c.set...))
		})
	}
}

// TestChartComparisonFails: the comparison sees a changed overlay (the
// chart's base values against overlays/postgres) and a changed chart.
func TestChartComparisonFails(t *testing.T) {
	helm, kubectl := tools(t)
	kz := renderKustomize(t, kubectl, filepath.Join(kustomizeDir, "overlays", "postgres"))
	chart := renderHelm(t, helm, nil)
	if diffs := differences(kz, chart); len(diffs) == 0 {
		t.Error("the chart's defaults compare equal to overlays/postgres")
	}
	chart = renderHelm(t, helm, nil, "kubeController.replicas=3")
	if diffs := differences(renderKustomize(t, kubectl, kustomizeDir), chart); len(diffs) != 1 || !strings.Contains(diffs[0], "Deployment flowlb-system/flowlb-kube-controller") {
		t.Errorf("kube-controller replicas 3 against the base: differences %q, want the kube-controller's", diffs)
	}
}

// TestChartLint: helm lint --strict is clean with the defaults and with
// each overlay's values.
func TestChartLint(t *testing.T) {
	helm, _ := tools(t)
	values, err := filepath.Glob(filepath.Join(valuesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append([]string{""}, values...) {
		args := []string{"lint", "--strict", "--namespace", namespace, chartDir}
		if v != "" {
			args = append(args, "-f", v)
		}
		out := run(t, helm, args...)
		if !bytes.Contains(out, []byte("0 chart(s) failed")) {
			t.Errorf("helm %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestChartRefuses: values the chart cannot honour fail the render rather
// than install something broken.
func TestChartRefuses(t *testing.T) {
	helm, _ := tools(t)
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"server.replicas=2"}, "needs PostgreSQL"},
		{[]string{"agent.dataplane=xdp"}, "dataplane"},
		{[]string{"image.tags=x"}, "image"},
		{[]string{"kubernetesAPI.host=198.18.0.250"}, "kubernetesAPI.port is required"},
	} {
		args := []string{"template", "flowlb", chartDir, "--namespace", namespace}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helm, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("helm %s: err %v, want an error saying %q\n%s", strings.Join(args, " "), err, c.want, out)
		}
	}
}

// TestChartConfigChecksum: a change of the configuration rolls the pods
// that read it, as kustomize's hashed ConfigMap name does: the agents'
// and the kube-controllers' (and the server's, when it reads it); nothing
// else does.
func TestChartConfigChecksum(t *testing.T) {
	helm, _ := tools(t)
	sums := func(set ...string) map[string]string {
		args := []string{"template", "flowlb", chartDir, "--namespace", namespace}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out := map[string]string{}
		for _, o := range decode(t, "helm template", run(t, helm, args...)) {
			if s := str(o, "spec", "template", "metadata", "annotations", checksumAnnotation); s != "" {
				out[str(o, "metadata", "name")] = s
			}
		}
		return out
	}
	a, b := sums(), sums("config.clusterName=other")
	for _, name := range []string{"flowlb-agent", "flowlb-kube-controller"} {
		if a[name] == "" || a[name] == b[name] {
			t.Errorf("%s: checksum %q, with another cluster name %q: want two different ones", name, a[name], b[name])
		}
	}
	// Not at another image or chart version: the image rolls the pods
	// itself, and a new chart with the same configuration should not.
	if c := sums("image.tag=v9"); c["flowlb-agent"] != a["flowlb-agent"] {
		t.Errorf("another image tag changes the agents' config checksum: %q, %q", a["flowlb-agent"], c["flowlb-agent"])
	}
	if _, ok := a["flowlb-server"]; ok {
		t.Error("the base server reads no ConfigMap but carries a checksum (a config change would restart it for nothing)")
	}
}

// TestHelmBinsVersion: hack/helm-bins.sh builds the Helm the tests look
// for.
func TestHelmBinsVersion(t *testing.T) {
	b, err := os.ReadFile("../../hack/helm-bins.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`version="\$\{FLOWLB_HELM_VERSION:-([^}]+)\}"`).FindSubmatch(b)
	if m == nil || string(m[1]) != Version {
		t.Errorf("hack/helm-bins.sh's default version %q, helm.Version %q", m, Version)
	}
}
