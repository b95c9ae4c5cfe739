package kubelet

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Volumes of a flowlb pod in the lab. Content volumes (ConfigMap, Secret,
// projected, downward API) become files the kubelet writes into the pod's
// directory; emptyDir an empty directory there; a hostPath a directory of
// the node's own tree (lab nodes share the machine's file system, so each
// gets one), or, at a kernel file system's path, the lab's directory that
// stands for it on that node (its cgroup, its bpffs directory); a
// persistentVolumeClaim a directory per claim that outlives its pods (the
// claim is not bound: the lab has no volume provisioner).

// volume is where one pod volume's content lives.
type volume struct {
	files map[string][]byte // content volumes: path within the volume → bytes
	dir   string            // the directory (set for every kind)
}

// volumeDirs are the roots the kubelet keeps volumes under.
type volumeDirs struct {
	pod    string // this pod's directory (content volumes, emptyDirs)
	node   string // the node's tree (hostPath)
	claims string // claims of the lab, <claims>/<namespace>/<claim>
	// host maps a real node's path to the lab's directory that stands
	// for it on this node (hostPaths at or below it).
	host map[string]string
}

// hostPath is the directory of a hostPath volume at path p: below the
// longest path of host that holds p, else in the node's tree.
func (d volumeDirs) hostPath(p string) string {
	p = filepath.Clean("/" + p)
	out, longest := filepath.Join(d.node, p), -1
	for root, dir := range d.host {
		if rest, ok := strings.CutPrefix(p, root); ok && (rest == "" || rest[0] == '/') && len(root) > longest {
			out, longest = filepath.Join(dir, rest), len(root)
		}
	}
	return out
}

// podVolumes resolves every volume of pod.
func podVolumes(pod *corev1.Pod, src Sources, pe podEnv, dirs volumeDirs) (map[string]volume, error) {
	out := map[string]volume{}
	for _, v := range pod.Spec.Volumes {
		vol := volume{dir: filepath.Join(dirs.pod, "volumes", v.Name)}
		var err error
		switch {
		case v.ConfigMap != nil:
			vol.files, err = configMapFiles(pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, src)
		case v.Secret != nil:
			vol.files, err = secretFiles(pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, src)
		case v.Projected != nil:
			vol.files, err = projectedFiles(pod, v.Projected, src, pe)
		case v.DownwardAPI != nil:
			vol.files, err = downwardFiles(pod, v.DownwardAPI.Items, pe)
		case v.EmptyDir != nil:
		case v.HostPath != nil:
			vol.dir = dirs.hostPath(v.HostPath.Path)
		case v.PersistentVolumeClaim != nil:
			vol.dir = filepath.Join(dirs.claims, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		default:
			err = fmt.Errorf("unsupported volume kind")
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		out[v.Name] = vol
	}
	return out, nil
}

// keyFiles maps data to files: every key, or only items (key → path).
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, what string) (map[string][]byte, error) {
	files := map[string][]byte{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("%s has no key %s", what, it.Key)
		}
		files[path.Clean(it.Path)] = v
	}
	return files, nil
}

func configMapFiles(ns, name string, items []corev1.KeyToPath, optional *bool, src Sources) (map[string][]byte, error) {
	data, err := src.ConfigMap(ns, name)
	if err != nil {
		if optional != nil && *optional {
			return map[string][]byte{}, nil
		}
		return nil, err
	}
	bd := make(map[string][]byte, len(data))
	for k, v := range data {
		bd[k] = []byte(v)
	}
	return keyFiles(bd, items, "configmap "+name)
}

func secretFiles(ns, name string, items []corev1.KeyToPath, optional *bool, src Sources) (map[string][]byte, error) {
	data, err := src.Secret(ns, name)
	if err != nil {
		if optional != nil && *optional {
			return map[string][]byte{}, nil
		}
		return nil, err
	}
	return keyFiles(data, items, "secret "+name)
}

func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, pe podEnv) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, it := range items {
		if it.FieldRef == nil {
			return nil, fmt.Errorf("downward API file %s: only fieldRef is supported", it.Path)
		}
		v, err := fieldValue(pod, it.FieldRef.FieldPath, pe)
		if err != nil {
			return nil, err
		}
		files[path.Clean(it.Path)] = []byte(v)
	}
	return files, nil
}

// projectedFiles: what the ServiceAccount admission plugin projects
// (token, ca.crt from the kube-root-ca.crt ConfigMap, namespace) and any
// other source.
func projectedFiles(pod *corev1.Pod, p *corev1.ProjectedVolumeSource, src Sources, pe podEnv) (map[string][]byte, error) {
	files := map[string][]byte{}
	merge := func(m map[string][]byte) {
		for k, v := range m {
			files[k] = v
		}
	}
	for _, s := range p.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			t := s.ServiceAccountToken
			secs := int64(3607)
			if t.ExpirationSeconds != nil {
				secs = *t.ExpirationSeconds
			}
			tok, err := src.Token(pod, t.Audience, secs)
			if err != nil {
				return nil, fmt.Errorf("service account token: %w", err)
			}
			files[path.Clean(t.Path)] = []byte(tok)
		case s.ConfigMap != nil:
			m, err := configMapFiles(pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, src)
			if err != nil {
				return nil, err
			}
			merge(m)
		case s.Secret != nil:
			m, err := secretFiles(pod.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional, src)
			if err != nil {
				return nil, err
			}
			merge(m)
		case s.DownwardAPI != nil:
			m, err := downwardFiles(pod, s.DownwardAPI.Items, pe)
			if err != nil {
				return nil, err
			}
			merge(m)
		case s.ClusterTrustBundle != nil, s.PodCertificate != nil:
			return nil, fmt.Errorf("unsupported projected source")
		}
	}
	return files, nil
}

// mount is a bind mount of a volume directory onto a container path.
type mount struct {
	source, target string
	readOnly       bool
}

// containerMounts are c's volume mounts onto volumes' directories.
func containerMounts(c corev1.Container, vols map[string]volume) ([]mount, error) {
	var out []mount
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s mounts unknown volume %s", c.Name, m.Name)
		}
		src := v.dir
		if m.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+m.SubPath))
		}
		out = append(out, mount{source: src, target: filepath.Clean(m.MountPath), readOnly: m.ReadOnly || v.files != nil})
	}
	return out, nil
}
