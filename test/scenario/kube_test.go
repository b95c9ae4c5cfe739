package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"rsc.io/script"
	"sigs.k8s.io/yaml"

	"github.com/flowlb/flowlb/internal/kube/kubelb"
	"github.com/flowlb/flowlb/internal/server/apitest"
)

// kube holds the Kubernetes objects a scenario applied, as the
// kube-controller's informers would, and applies Services through the
// controller's translation (kubelb.Desired) and its call plan
// (kubelb.Octavia) against the scenario's API.
type kube struct {
	octavia  *kubelb.Octavia
	opts     kubelb.Options
	services map[string]*corev1.Service
	slices   map[string]*discoveryv1.EndpointSlice
}

func (w *world) kubeState() *kube {
	if w.kube == nil {
		w.kube = &kube{
			octavia:  &kubelb.Octavia{Client: apitest.NoAuthClient(w.api.URL)},
			opts:     kubelb.Options{Cluster: "scn", ClusterIPSubnet: w.clusterSubnet, ExternalSubnet: w.externalSubnet},
			services: map[string]*corev1.Service{},
			slices:   map[string]*discoveryv1.EndpointSlice{},
		}
	}
	return w.kube
}

func (w *world) cmdKube(s *script.State, args ...string) (script.WaitFunc, error) {
	if len(args) < 2 {
		return nil, script.ErrUsage
	}
	k := w.kubeState()
	var out bytes.Buffer
	switch {
	case args[0] == "apply":
		touched := map[string]bool{}
		for _, f := range args[1:] {
			names, err := k.load(s.Path(f))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, n := range names {
				touched[n] = true
			}
		}
		for _, key := range sortedKeys(touched) {
			if err := w.applyService(k, key, &out); err != nil {
				return nil, err
			}
		}
	case args[0] == "delete" && len(args) == 3 && args[1] == "service":
		key := args[2]
		if !strings.Contains(key, "/") {
			key = "default/" + key
		}
		delete(k.services, key)
		if err := w.applyService(k, key, &out); err != nil {
			return nil, err
		}
	default:
		return nil, script.ErrUsage
	}
	return func(*script.State) (string, string, error) { return out.String(), "", nil }, nil
}

// load reads the Services and EndpointSlices of a YAML file and returns
// the Services they concern (namespace/name).
func (k *kube) load(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, err
		}
		var meta struct{ Kind string }
		if err := json.Unmarshal(js, &meta); err != nil {
			return nil, err
		}
		switch meta.Kind {
		case "Service":
			svc := &corev1.Service{}
			if err := json.Unmarshal(js, svc); err != nil {
				return nil, err
			}
			defaultNamespace(&svc.ObjectMeta.Namespace)
			key := svc.Namespace + "/" + svc.Name
			k.services[key] = svc
			names = append(names, key)
		case "EndpointSlice":
			es := &discoveryv1.EndpointSlice{}
			if err := json.Unmarshal(js, es); err != nil {
				return nil, err
			}
			defaultNamespace(&es.ObjectMeta.Namespace)
			k.slices[es.Namespace+"/"+es.Name] = es
			names = append(names, es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName])
		default:
			return nil, fmt.Errorf("kind %q: only Service and EndpointSlice", meta.Kind)
		}
	}
	return names, nil
}

func defaultNamespace(ns *string) {
	if *ns == "" {
		*ns = "default"
	}
}

// applyService does what the controller's reconcile does for one
// Service: apply its load balancer, or delete it when the Service is gone
// or not served.
func (w *world) applyService(k *kube, key string, out *bytes.Buffer) error {
	ns, name, _ := strings.Cut(key, "/")
	svc := k.services[key]
	var want *kubelb.LB
	if svc != nil {
		var eps []*discoveryv1.EndpointSlice
		for _, es := range k.slices {
			if es.Namespace == ns && es.Labels[discoveryv1.LabelServiceName] == name {
				eps = append(eps, es)
			}
		}
		sort.Slice(eps, func(i, j int) bool { return eps[i].Name < eps[j].Name })
		var err error
		if want, err = kubelb.Desired(svc, eps, k.opts); err != nil {
			fmt.Fprintf(out, "service %s: invalid: %v\n", key, err)
			return nil
		}
	}
	if want == nil {
		cur, err := k.octavia.Find(w.ctx, kubelb.Name(k.opts.Cluster, ns, name))
		if err != nil || cur == nil {
			fmt.Fprintf(out, "service %s: no load balancer\n", key)
			return err
		}
		fmt.Fprintf(out, "service %s: load balancer deleted\n", key)
		return k.octavia.Delete(w.ctx, cur.ID)
	}
	vip, calls, err := k.octavia.Apply(w.ctx, want)
	if err != nil {
		return fmt.Errorf("apply service %s: %w", key, err)
	}
	fmt.Fprintf(out, "service %s: VIP %s, %d calls\n", key, vip.VIPAddress, calls)
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
