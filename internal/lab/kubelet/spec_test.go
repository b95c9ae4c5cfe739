package kubelet

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestPodPorts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        []corev1.Container
		tcp, udp []int
	}{
		{name: "none", c: []corev1.Container{{Name: "a"}}},
		{name: "tcp default and udp", c: []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{
			{ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 53, Protocol: corev1.ProtocolTCP},
		}}}, tcp: []int{53, 8080}, udp: []int{53}},
		{name: "sctp ignored", c: []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{{ContainerPort: 9, Protocol: corev1.ProtocolSCTP}}}}},
		{name: "several containers, duplicates once, sorted", c: []corev1.Container{
			{Name: "a", Ports: []corev1.ContainerPort{{ContainerPort: 9000}, {ContainerPort: 80}}},
			{Name: "b", Ports: []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 443}}},
		}, tcp: []int{80, 443, 9000}},
		{name: "probe ports listen too, named ones resolved", c: []corev1.Container{{
			Name:           "a",
			Ports:          []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8081)}}},
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("web")}}},
			StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}},
		}}, tcp: []int{8080, 8081}},
		{name: "probe of an unknown port name adds nothing", c: []corev1.Container{{
			Name:           "a",
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("nope")}}},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tcp, udp := podPorts(&corev1.Pod{Spec: corev1.PodSpec{Containers: tc.c}})
			if !slices.Equal(tcp, tc.tcp) || !slices.Equal(udp, tc.udp) {
				t.Errorf("tcp %v udp %v, want %v %v", tcp, udp, tc.tcp, tc.udp)
			}
		})
	}
}

func TestResolvePort(t *testing.T) {
	c := corev1.Container{Name: "a", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	for _, tc := range []struct {
		p    intstr.IntOrString
		want int32
		err  bool
	}{
		{p: intstr.FromInt32(80), want: 80},
		{p: intstr.FromString("http"), want: 8080},
		{p: intstr.FromString("9090"), want: 9090},
		{p: intstr.FromString("grpc"), err: true},
		{p: intstr.FromInt32(0), err: true},
		{p: intstr.FromInt32(70000), err: true},
	} {
		got, err := resolvePort(c, tc.p)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("resolvePort(%v) = %d, %v; want %d, error %v", tc.p.String(), got, err, tc.want, tc.err)
		}
	}
}

func TestSleepCommand(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want time.Duration
	}{
		{[]string{"sleep", "5"}, 5 * time.Second},
		{[]string{"/bin/sleep", "1.5"}, 1500 * time.Millisecond},
		{[]string{"sleep", "2s"}, 2 * time.Second},
		{[]string{"sh", "-c", "sleep 3"}, 3 * time.Second},
		{[]string{"/bin/bash", "-c", "sleep 4"}, 4 * time.Second},
		{[]string{"sh", "-c", "sleep 3 && nginx -s quit"}, 0},
		{[]string{"sleep"}, 0},
		{[]string{"sleep", "-1"}, 0},
		{[]string{"sleep", "forever"}, 0},
		{[]string{"nginx", "-s", "quit"}, 0},
		{nil, 0},
	} {
		if got := sleepCommand(tc.argv); got != tc.want {
			t.Errorf("sleepCommand(%q) = %s, want %s", tc.argv, got, tc.want)
		}
	}
}

func TestPreStopWait(t *testing.T) {
	hook := func(h corev1.LifecycleHandler) corev1.Container {
		return corev1.Container{Name: "c", Lifecycle: &corev1.Lifecycle{PreStop: &h}}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "none"},
		hook(corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "2"}}}),
		hook(corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 7}}),
		hook(corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}),
	}}}
	if got := preStopWait(pod); got != 7*time.Second {
		t.Errorf("preStopWait = %s, want the longest hook, 7s", got)
	}
	if got := preStopWait(&corev1.Pod{}); got != 0 {
		t.Errorf("preStopWait of no hooks = %s", got)
	}
}

func TestGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		deletion, spec *int64
		want           time.Duration
	}{
		{nil, nil, 30 * time.Second},
		{nil, ptr.To(int64(5)), 5 * time.Second},
		{ptr.To(int64(1)), ptr.To(int64(5)), time.Second},
		{ptr.To(int64(0)), nil, 0},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: tc.spec}}
		p.DeletionGracePeriodSeconds = tc.deletion
		if got := gracePeriod(p); got != tc.want {
			t.Errorf("gracePeriod(deletion %v, spec %v) = %s, want %s", ptr.Deref(tc.deletion, -1), ptr.Deref(tc.spec, -1), got, tc.want)
		}
	}
}

func TestTimingDefaults(t *testing.T) {
	got := timing(&corev1.Probe{})
	want := probeTiming{period: 10 * time.Second, timeout: time.Second, success: 1, failure: 3}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	got = timing(&corev1.Probe{InitialDelaySeconds: 2, PeriodSeconds: 1, TimeoutSeconds: 3, SuccessThreshold: 2, FailureThreshold: 1})
	want = probeTiming{initialDelay: 2 * time.Second, period: time.Second, timeout: 3 * time.Second, success: 2, failure: 1}
	if got != want {
		t.Errorf("set %+v, want %+v", got, want)
	}
}

func TestProbeThresholds(t *testing.T) {
	s := &probeState{t: probeTiming{success: 2, failure: 3}}
	steps := []struct {
		ok, want bool
	}{
		{true, false}, {true, true}, // two successes to turn ready
		{false, true}, {false, true}, {false, false}, // three failures to turn unready
		{true, false}, {false, false}, {true, false}, {true, true},
	}
	for i, st := range steps {
		if got := s.observe(st.ok); got != st.want {
			t.Fatalf("step %d (ok %v): ready %v, want %v", i, st.ok, got, st.want)
		}
	}
}

func TestPodStatus(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "img:a"}, {Name: "b", Image: "img:b"}}},
		Status:     corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort},
	}
	t0 := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	v := runView{hostIPs: []string{"198.18.0.2", "2001:2::2"}, podIPs: []string{"198.18.18.3", "2001:2:0:4002::3"}, started: t0.Time, running: true, restarts: 1,
		ready: map[string]bool{"a": true, "b": false}}
	st := podStatus(pod, v, t0)
	if st.Phase != corev1.PodRunning || st.PodIP != "198.18.18.3" || len(st.PodIPs) != 2 || st.PodIPs[0].IP != st.PodIP || st.PodIPs[1].IP != "2001:2:0:4002::3" ||
		st.HostIP != "198.18.0.2" || len(st.HostIPs) != 2 || st.HostIPs[1].IP != "2001:2::2" || st.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("status %+v", st)
	}
	cond := func(st corev1.PodStatus, typ corev1.PodConditionType) corev1.PodCondition {
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c
			}
		}
		t.Fatalf("no condition %s in %+v", typ, st.Conditions)
		return corev1.PodCondition{}
	}
	if c := cond(st, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" {
		t.Errorf("one container unready: Ready %+v", c)
	}
	if c := cond(st, corev1.PodScheduled); c.Status != corev1.ConditionTrue {
		t.Errorf("PodScheduled %+v", c)
	}
	if len(st.ContainerStatuses) != 2 || !st.ContainerStatuses[0].Ready || st.ContainerStatuses[1].Ready ||
		st.ContainerStatuses[0].State.Running == nil || st.ContainerStatuses[0].RestartCount != 1 || st.ContainerStatuses[1].Image != "img:b" {
		t.Errorf("container statuses %+v", st.ContainerStatuses)
	}

	// Both ready: Ready turns true with a new transition time; a later
	// status with the same readiness keeps it.
	pod.Status = st
	t1 := metav1.NewTime(t0.Add(time.Minute))
	v.ready["b"] = true
	st = podStatus(pod, v, t1)
	if c := cond(st, corev1.PodReady); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("all ready: Ready %+v", c)
	}
	if c := cond(st, corev1.PodScheduled); !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("PodScheduled transition moved: %+v", c)
	}
	pod.Status = st
	t2 := metav1.NewTime(t1.Add(time.Minute))
	if c := cond(podStatus(pod, v, t2), corev1.PodReady); !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("unchanged Ready moved its transition time: %+v", c)
	}

	// The server down: not ready whatever the probes say, waiting.
	v.running = false
	st = podStatus(pod, v, t2)
	if c := cond(st, corev1.PodReady); c.Status != corev1.ConditionFalse {
		t.Errorf("server down: Ready %+v", c)
	}
	if st.ContainerStatuses[0].Ready || st.ContainerStatuses[0].State.Waiting == nil {
		t.Errorf("server down: container %+v", st.ContainerStatuses[0])
	}
}
