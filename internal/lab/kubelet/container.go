package kubelet

import (
	"cmp"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The translation of a container of the flowlb image into a process the
// lab runs: the lab's flowlb binary with the container's arguments, its
// environment resolved as a kubelet resolves it, and its volumes as files
// to write and directories to bind onto the mount paths. Pure: what the
// API holds comes in through Sources.

// Sources is what a pod's environment and volumes refer to.
type Sources interface {
	ConfigMap(namespace, name string) (map[string]string, error)
	Secret(namespace, name string) (map[string][]byte, error)
	// Token is a token of pod's service account for a projected volume,
	// bound to the pod (so it dies with it, and the API server extends
	// the default 3607 s as it does for a kubelet).
	Token(pod *corev1.Pod, audience string, seconds int64) (string, error)
}

// IsFlowlbImage reports whether the lab runs image as its flowlb binary:
// its repository's last path element is flowlb (any registry, tag or
// digest), e.g. flowlb:0.1.0, ghcr.io/x/flowlb@sha256:...
func IsFlowlbImage(image string) bool {
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return path.Base(repo) == "flowlb"
}

// podEnv is what downward API fields and the API server's address come
// from.
type podEnv struct {
	hostIP, podIP string
	// hostIPs, podIPs: both families, comma-separated, as the downward
	// API gives status.hostIPs and status.podIPs.
	hostIPs, podIPs string
	apiHost         string // KUBERNETES_SERVICE_HOST
	apiPort         int
}

// containerEnv resolves c's environment in order: the API server's
// address (so in-cluster config works), envFrom, then env, each value
// expanded against the variables before it. A missing ConfigMap, Secret
// or key is an error unless optional, as for a kubelet, which does not
// start the container.
func containerEnv(pod *corev1.Pod, c corev1.Container, src Sources, pe podEnv) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	set("KUBERNETES_SERVICE_HOST", pe.apiHost)
	set("KUBERNETES_SERVICE_PORT", strconv.Itoa(pe.apiPort))
	set("HOSTNAME", pod.Name)
	for _, ef := range c.EnvFrom {
		var data map[string]string
		var err error
		optional := false
		switch {
		case ef.ConfigMapRef != nil:
			optional = ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional
			data, err = src.ConfigMap(pod.Namespace, ef.ConfigMapRef.Name)
		case ef.SecretRef != nil:
			optional = ef.SecretRef.Optional != nil && *ef.SecretRef.Optional
			var sd map[string][]byte
			sd, err = src.Secret(pod.Namespace, ef.SecretRef.Name)
			data = stringData(sd)
		}
		if err != nil {
			if optional {
				continue
			}
			return nil, nil, fmt.Errorf("container %s envFrom: %w", c.Name, err)
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(ef.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := envSource(pod, e.ValueFrom, src, pe)
		if err != nil {
			return nil, nil, fmt.Errorf("container %s env %s: %w", c.Name, e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, vars, nil
}

func stringData(d map[string][]byte) map[string]string {
	out := make(map[string]string, len(d))
	for k, v := range d {
		out[k] = string(v)
	}
	return out
}

// envSource resolves one valueFrom; false: an optional source is missing
// (the variable is not set).
func envSource(pod *corev1.Pod, vf *corev1.EnvVarSource, src Sources, pe podEnv) (string, bool, error) {
	switch {
	case vf.FieldRef != nil:
		v, err := fieldValue(pod, vf.FieldRef.FieldPath, pe)
		return v, err == nil, err
	case vf.ConfigMapKeyRef != nil:
		r := vf.ConfigMapKeyRef
		data, err := src.ConfigMap(pod.Namespace, r.Name)
		if err == nil {
			if v, ok := data[r.Key]; ok {
				return v, true, nil
			}
			err = fmt.Errorf("configmap %s has no key %s", r.Name, r.Key)
		}
		if r.Optional != nil && *r.Optional {
			return "", false, nil
		}
		return "", false, err
	case vf.SecretKeyRef != nil:
		r := vf.SecretKeyRef
		data, err := src.Secret(pod.Namespace, r.Name)
		if err == nil {
			if v, ok := data[r.Key]; ok {
				return string(v), true, nil
			}
			err = fmt.Errorf("secret %s has no key %s", r.Name, r.Key)
		}
		if r.Optional != nil && *r.Optional {
			return "", false, nil
		}
		return "", false, err
	}
	return "", false, fmt.Errorf("unsupported valueFrom (resourceFieldRef, fileKeyRef)")
}

// fieldValue is a downward API field of pod.
func fieldValue(pod *corev1.Pod, field string, pe podEnv) (string, error) {
	switch field {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pe.hostIP, nil
	case "status.hostIPs":
		return cmp.Or(pe.hostIPs, pe.hostIP), nil
	case "status.podIP":
		return pe.podIP, nil
	case "status.podIPs":
		return cmp.Or(pe.podIPs, pe.podIP), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(field, prefix+"['"); ok {
			if k, ok := strings.CutSuffix(rest, "']"); ok {
				return m[k], nil
			}
		}
	}
	return "", fmt.Errorf("unsupported fieldPath %q", field)
}

// expand replaces $(VAR) with the value of VAR as Kubernetes does: $$ is
// a literal $, and a reference to an undefined variable stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+end])
				}
				i += 2 + end
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerArgv is the process of a flowlb container: bin with the
// image's entrypoint (flowlb) or the command's arguments after a flowlb
// executable, then args, all expanded against the environment.
func containerArgv(bin string, c corev1.Container, vars map[string]string) ([]string, error) {
	argv := []string{bin}
	if len(c.Command) > 0 {
		if path.Base(c.Command[0]) != "flowlb" {
			return nil, fmt.Errorf("container %s: command %q is not the flowlb binary", c.Name, c.Command[0])
		}
		for _, a := range c.Command[1:] {
			argv = append(argv, expand(a, vars))
		}
	}
	for _, a := range c.Args {
		argv = append(argv, expand(a, vars))
	}
	return argv, nil
}
