package kubelet

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The translation of a pod spec into what the lab runs, kept free of I/O:
// every container becomes the lab echo server listening on the
// container's ports (whatever its image), probes are TCP connects or HTTP
// GETs from the node, and a preStop hook is a wait.

// podPorts are the ports the pod's echo server listens on: every
// container port, and the ports its probes check (so a probe of a port the
// spec forgot to declare still finds a listener).
func podPorts(pod *corev1.Pod) (tcp, udp []int) {
	add := func(dst *[]int, p int32) {
		if p > 0 && !slices.Contains(*dst, int(p)) {
			*dst = append(*dst, int(p))
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			switch p.Protocol {
			case corev1.ProtocolUDP:
				add(&udp, p.ContainerPort)
			case corev1.ProtocolTCP, "":
				add(&tcp, p.ContainerPort)
			}
		}
		for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if pr == nil {
				continue
			}
			if port, err := probePort(c, pr); err == nil && port > 0 {
				add(&tcp, port)
			}
		}
	}
	slices.Sort(tcp)
	slices.Sort(udp)
	return tcp, udp
}

// resolvePort turns a probe's port (number or container port name) into
// a number.
func resolvePort(c corev1.Container, p intstr.IntOrString) (int32, error) {
	if p.Type == intstr.Int {
		if p.IntVal < 1 || p.IntVal > 65535 {
			return 0, fmt.Errorf("port %d out of range", p.IntVal)
		}
		return p.IntVal, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n < 65536 {
		return int32(n), nil
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.Name, p.StrVal)
}

// probePort is the port a TCP or HTTP probe checks (0 for other probes).
func probePort(c corev1.Container, pr *corev1.Probe) (int32, error) {
	switch {
	case pr.TCPSocket != nil:
		return resolvePort(c, pr.TCPSocket.Port)
	case pr.HTTPGet != nil:
		return resolvePort(c, pr.HTTPGet.Port)
	}
	return 0, nil
}

// gracePeriod is how long the pod may take to stop once deleted.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// preStopWait is how long the pod's preStop hooks take: the lab runs no
// commands, but a hook `sleep N` (exec, possibly through `sh -c`, or the
// sleep action) is a wait of N seconds. Containers' hooks run in
// parallel, so the longest counts.
func preStopWait(pod *corev1.Pod) time.Duration {
	var longest time.Duration
	for _, c := range pod.Spec.Containers {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			continue
		}
		var d time.Duration
		switch h := c.Lifecycle.PreStop; {
		case h.Sleep != nil:
			d = time.Duration(h.Sleep.Seconds) * time.Second
		case h.Exec != nil:
			d = sleepCommand(h.Exec.Command)
		}
		longest = max(longest, d)
	}
	return longest
}

// sleepCommand recognises `sleep N`, `/bin/sleep N` and `sh -c "sleep N"`
// (N in seconds, fractions and an s suffix allowed) and returns N; any
// other command takes no time.
func sleepCommand(argv []string) time.Duration {
	if len(argv) == 3 && (argv[0] == "sh" || strings.HasSuffix(argv[0], "/sh") || argv[0] == "bash" || strings.HasSuffix(argv[0], "/bash")) && argv[1] == "-c" {
		argv = strings.Fields(argv[2])
	}
	if len(argv) != 2 || (argv[0] != "sleep" && !strings.HasSuffix(argv[0], "/sleep")) {
		return 0
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(argv[1], "s"), 64)
	if err != nil || f < 0 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// probeTiming is a probe's schedule with Kubernetes' defaults filled in.
type probeTiming struct {
	initialDelay, period, timeout time.Duration
	success, failure              int32
}

func timing(pr *corev1.Probe) probeTiming {
	t := probeTiming{
		initialDelay: time.Duration(pr.InitialDelaySeconds) * time.Second,
		period:       time.Duration(pr.PeriodSeconds) * time.Second,
		timeout:      time.Duration(pr.TimeoutSeconds) * time.Second,
		success:      pr.SuccessThreshold,
		failure:      pr.FailureThreshold,
	}
	if t.period <= 0 {
		t.period = 10 * time.Second
	}
	if t.timeout <= 0 {
		t.timeout = time.Second
	}
	if t.success <= 0 {
		t.success = 1
	}
	if t.failure <= 0 {
		t.failure = 3
	}
	return t
}

// runView is what the status of a running pod is made of.
type runView struct {
	// hostIPs and podIPs: the IPv4 address first, then the IPv6 one.
	hostIPs, podIPs []string
	started         time.Time
	ready           map[string]bool // container name → ready
	running         bool            // the echo server is up
	restarts        int32
}

// podStatus is the status of a pod the lab runs. Conditions keep their
// transition time while they hold; fields the API server owns (QoS class)
// are kept.
func podStatus(pod *corev1.Pod, v runView, now metav1.Time) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	st.HostIP, st.HostIPs = "", nil
	for _, ip := range v.hostIPs {
		st.HostIP = cmp.Or(st.HostIP, ip)
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	st.PodIP, st.PodIPs = "", nil
	for _, ip := range v.podIPs {
		st.PodIP = cmp.Or(st.PodIP, ip)
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	st.Reason, st.Message = "", ""
	start := metav1.NewTime(v.started.Truncate(time.Second))
	st.StartTime = &start

	allReady := v.running
	var cs []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		ready := v.running && v.ready[c.Name]
		allReady = allReady && ready
		s := corev1.ContainerStatus{
			Name:         c.Name,
			Image:        c.Image,
			ImageID:      "flowlb-lab://echo",
			ContainerID:  "flowlb-lab://" + string(pod.UID) + "/" + c.Name,
			Ready:        ready,
			Started:      &v.running,
			RestartCount: v.restarts,
		}
		if v.running {
			s.State.Running = &corev1.ContainerStateRunning{StartedAt: start}
		} else {
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		cs = append(cs, s)
	}
	st.ContainerStatuses = cs

	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		status := corev1.ConditionFalse
		if ok {
			status, reason = corev1.ConditionTrue, ""
		}
		c := corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now}
		for i, o := range st.Conditions {
			if o.Type == t {
				if o.Status == status {
					c.LastTransitionTime = o.LastTransitionTime
				}
				st.Conditions[i] = c
				return
			}
		}
		st.Conditions = append(st.Conditions, c)
	}
	cond(corev1.PodReadyToStartContainers, true, "")
	cond(corev1.PodInitialized, true, "")
	cond(corev1.ContainersReady, allReady, "ContainersNotReady")
	cond(corev1.PodReady, allReady, "ContainersNotReady")
	cond(corev1.PodScheduled, true, "")
	return st
}
