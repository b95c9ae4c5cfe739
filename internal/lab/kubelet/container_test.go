package kubelet

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// fakeSources holds ConfigMaps and Secrets of namespace "ns".
type fakeSources struct {
	cms     map[string]map[string]string
	secrets map[string]map[string][]byte
}

var errNotFound = errors.New("not found")

func (f fakeSources) ConfigMap(ns, name string) (map[string]string, error) {
	if d, ok := f.cms[ns+"/"+name]; ok {
		return d, nil
	}
	return nil, errNotFound
}

func (f fakeSources) Secret(ns, name string) (map[string][]byte, error) {
	if d, ok := f.secrets[ns+"/"+name]; ok {
		return d, nil
	}
	return nil, errNotFound
}

func (f fakeSources) Token(pod *corev1.Pod, aud string, secs int64) (string, error) {
	return "token:" + pod.Namespace + "/" + pod.Spec.ServiceAccountName, nil
}

var testSources = fakeSources{
	cms:     map[string]map[string]string{"ns/cfg": {"servers": "198.18.0.1:9877", "b": "2", "a": "1"}, "ns/kube-root-ca.crt": {"ca.crt": "CA"}},
	secrets: map[string]map[string][]byte{"ns/agent": {"token": []byte("t0k"), "ca.crt": []byte("PEM")}},
}

func TestIsFlowlbImage(t *testing.T) {
	for image, want := range map[string]bool{
		"flowlb": true, "flowlb:0.1.0-dev": true, "ghcr.io/org/flowlb:v1": true, "localhost:5000/flowlb": true,
		"reg.example/flowlb@sha256:abcd": true, "nginx": false, "flowlb/echo": false, "reg.example:5000/x/flowlb-test:1": false,
	} {
		if got := IsFlowlbImage(image); got != want {
			t.Errorf("IsFlowlbImage(%q) = %v, want %v", image, got, want)
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	for in, want := range map[string]string{
		"--a=$(A)": "--a=x", "$(A)$(A)": "xx", "$$(A)": "$(A)", "$(B)": "$(B)", "--e=$(EMPTY)": "--e=",
		"$": "$", "a$b": "a$b", "$(A": "$(A", "$$": "$",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent-x", UID: "u1", Labels: map[string]string{"app": "agent"}},
		Spec:       corev1.PodSpec{NodeName: "n2", ServiceAccountName: "flowlb-agent"},
	}
}

var testPodEnv = podEnv{hostIP: "198.18.0.2", podIP: "198.18.0.2", apiHost: "198.18.0.250", apiPort: 6443}

// TestContainerEnvAndArgv: the API server's address, envFrom (sorted, with
// prefix), literals expanded against earlier variables, downward API
// fields, ConfigMap and Secret keys; the argv is the lab's binary with
// command and args expanded.
func TestContainerEnvAndArgv(t *testing.T) {
	c := corev1.Container{Name: "agent", Image: "flowlb:1",
		EnvFrom: []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		Env: []corev1.EnvVar{
			{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "SERVERS", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "servers"}}},
			{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "agent"}, Key: "token"}}},
			{Name: "MAYBE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "k", Optional: ptr.To(true)}}},
			{Name: "LISTEN", Value: "$(IP):9878"},
		},
		Command: []string{"/usr/local/bin/flowlb"},
		Args:    []string{"agent", "--server=$(SERVERS)", "--node=$(NODE)", "--metrics-listen=$(LISTEN)", "--zone=$(MAYBE)"},
	}
	env, vars, err := containerEnv(testPod(), c, testSources, testPodEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"KUBERNETES_SERVICE_HOST=198.18.0.250", "KUBERNETES_SERVICE_PORT=6443", "HOSTNAME=agent-x",
		"CFG_a=1", "CFG_b=2", "CFG_servers=198.18.0.1:9877", "NODE=n2", "IP=198.18.0.2", "APP=agent",
		"SERVERS=198.18.0.1:9877", "TOKEN=t0k", "LISTEN=198.18.0.2:9878"}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env\n got %q\nwant %q", env, want)
	}
	argv, err := containerArgv("/opt/flowlb", c, vars)
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{"/opt/flowlb", "agent", "--server=198.18.0.1:9877", "--node=n2", "--metrics-listen=198.18.0.2:9878", "--zone=$(MAYBE)"}
	if !reflect.DeepEqual(argv, wantArgv) {
		t.Errorf("argv\n got %q\nwant %q", argv, wantArgv)
	}
}

// TestContainerEnvErrors: a missing required source keeps the container
// from starting, as with a kubelet; so does a command that is not flowlb.
func TestContainerEnvErrors(t *testing.T) {
	for name, e := range map[string]corev1.EnvVar{
		"missing secret": {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "k"}}},
		"missing key":    {Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "nope"}}},
		"bad field":      {Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nope"}}},
	} {
		if _, _, err := containerEnv(testPod(), corev1.Container{Name: "c", Env: []corev1.EnvVar{e}}, testSources, testPodEnv); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := containerArgv("/opt/flowlb", corev1.Container{Name: "c", Command: []string{"/bin/sh"}}, nil); err == nil {
		t.Error("a shell command accepted")
	}
}

// TestPodVolumes: each kind of volume becomes files or a directory in the
// right root, and mounts bind them (content volumes read-only).
func TestPodVolumes(t *testing.T) {
	pod := testPod()
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "bootstrap", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "agent"}}},
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items: []corev1.KeyToPath{{Key: "servers", Path: "sub/servers.txt"}}}}},
		{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}},
		{Name: "identity", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/flowlb/agent"}}},
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "db"}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cgroup", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/cgroup"}}},
		{Name: "pins", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/bpf/flowlb/"}}},
		{Name: "not-cgroup", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs/cgroupx"}}},
		{Name: "above", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys/fs"}}},
	}
	dirs := volumeDirs{pod: "/lab/pods/u1", node: "/lab/nodes/n2", claims: "/lab/claims",
		host: map[string]string{"/sys/fs/cgroup": "/cg/lab/n2", "/sys/fs/bpf": "/lab/bpf/n2"}}
	vols, err := podVolumes(pod, testSources, testPodEnv, dirs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]volume{
		"bootstrap":       {dir: "/lab/pods/u1/volumes/bootstrap", files: map[string][]byte{"token": []byte("t0k"), "ca.crt": []byte("PEM")}},
		"cfg":             {dir: "/lab/pods/u1/volumes/cfg", files: map[string][]byte{"sub/servers.txt": []byte("198.18.0.1:9877")}},
		"kube-api-access": {dir: "/lab/pods/u1/volumes/kube-api-access", files: map[string][]byte{"token": []byte("token:ns/flowlb-agent"), "ca.crt": []byte("CA"), "namespace": []byte("ns")}},
		"identity":        {dir: "/lab/nodes/n2/var/lib/flowlb/agent"},
		"data":            {dir: "/lab/claims/ns/db"},
		"scratch":         {dir: "/lab/pods/u1/volumes/scratch"},
		// The node's kernel file systems, as the lab stands them in.
		"cgroup":     {dir: "/cg/lab/n2"},
		"pins":       {dir: "/lab/bpf/n2/flowlb"},
		"not-cgroup": {dir: "/lab/nodes/n2/sys/fs/cgroupx"},
		"above":      {dir: "/lab/nodes/n2/sys/fs"},
	}
	if !reflect.DeepEqual(vols, want) {
		t.Errorf("volumes\n got %v\nwant %v", vols, want)
	}
	c := corev1.Container{Name: "agent", VolumeMounts: []corev1.VolumeMount{
		{Name: "bootstrap", MountPath: "/etc/flowlb/agent/"},
		{Name: "identity", MountPath: "/var/lib/flowlb/agent"},
		{Name: "data", MountPath: "/data", SubPath: "db"},
	}}
	mounts, err := containerMounts(c, vols)
	if err != nil {
		t.Fatal(err)
	}
	wantMounts := []mount{
		{source: "/lab/pods/u1/volumes/bootstrap", target: "/etc/flowlb/agent", readOnly: true},
		{source: "/lab/nodes/n2/var/lib/flowlb/agent", target: "/var/lib/flowlb/agent"},
		{source: filepath.Join("/lab/claims/ns/db", "db"), target: "/data"},
	}
	if !reflect.DeepEqual(mounts, wantMounts) {
		t.Errorf("mounts\n got %v\nwant %v", mounts, wantMounts)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "x", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gone"}}})
	if _, err := podVolumes(pod, testSources, testPodEnv, dirs); err == nil {
		t.Error("a missing secret volume accepted")
	}
	if _, err := containerMounts(corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/x"}}}, vols); err == nil {
		t.Error("a mount of an unknown volume accepted")
	}
}

func TestRestartBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{0: 0, 1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 6: 10 * time.Second, 100: 10 * time.Second} {
		if got := restartBackoff(n); got != want {
			t.Errorf("restartBackoff(%d) = %s, want %s", n, got, want)
		}
	}
}
