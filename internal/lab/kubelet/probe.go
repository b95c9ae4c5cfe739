package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// probeTick is how often the prober looks at a pod: due probes run, and
// containers without a readiness probe follow their server being up.
const probeTick = 250 * time.Millisecond

// probeState follows one container's readiness probe.
type probeState struct {
	container corev1.Container
	probe     *corev1.Probe
	t         probeTiming
	next      time.Time
	succ      int32
	fail      int32
	ready     bool
}

// observe counts one result and returns the container's readiness: it
// turns ready after SuccessThreshold successes in a row and unready after
// FailureThreshold failures in a row.
func (s *probeState) observe(ok bool) bool {
	if ok {
		s.succ, s.fail = s.succ+1, 0
		if s.succ >= s.t.success {
			s.ready = true
		}
	} else {
		s.succ, s.fail = 0, s.fail+1
		if s.fail >= s.t.failure {
			s.ready = false
		}
	}
	return s.ready
}

// probe runs pod's readiness probes until ctx ends, records container
// readiness in r, restarts a server that died, and queues a status update
// on every change.
func (k *Kubelet) probe(ctx context.Context, pod *corev1.Pod, r *podRun) {
	start := time.Now()
	states := map[string]*probeState{}
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil {
			t := timing(c.ReadinessProbe)
			states[c.Name] = &probeState{container: c, probe: c.ReadinessProbe, t: t, next: start.Add(t.initialDelay)}
		}
	}
	tick := time.NewTicker(probeTick)
	defer tick.Stop()
	wasUp := true
	var lastRestart time.Time
	for {
		up := k.rt.Up(r.host)
		changed := up != wasUp
		wasUp = up
		k.mu.Lock()
		terminating, restarts := r.terminating, r.restarts
		k.mu.Unlock()
		if !up && !terminating && time.Since(lastRestart) >= restartBackoff(restarts) {
			// The "container" died: restart it, as restartPolicy Always
			// (the lab's only policy) says, backing off as it keeps dying.
			lastRestart = time.Now()
			if err := k.rt.Restart(ctx, r.host); err != nil {
				k.log.Warn("restart pod server", "pod", r.key, "err", err)
			} else {
				k.mu.Lock()
				r.restarts++
				k.mu.Unlock()
				k.log.Info("pod server restarted", "pod", r.key, "host", r.host)
			}
		}
		now := time.Now()
		for _, c := range pod.Spec.Containers {
			ready := up
			if s := states[c.Name]; s != nil {
				if !now.Before(s.next) {
					err := k.runProbe(ctx, r, s.container, s.probe, s.t.timeout)
					s.observe(err == nil)
					s.next = now.Add(s.t.period)
				}
				ready = up && s.ready
			}
			k.mu.Lock()
			if r.ready[c.Name] != ready {
				r.ready[c.Name] = ready
				changed = true
			}
			k.mu.Unlock()
		}
		if changed {
			k.queue.Add(r.key)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// restartBackoff is the least time between two restarts of a pod's
// server after n restarts: 0, then 500 ms doubling up to 10 s (a kubelet's
// CrashLoopBackOff, shorter).
func restartBackoff(n int32) time.Duration {
	if n == 0 {
		return 0
	}
	return min(10*time.Second, 500*time.Millisecond<<min(n-1, 5))
}

// runProbe runs one TCP or HTTP probe from the pod's node. Exec and gRPC
// probes cannot be run by the lab (no container, no gRPC health server):
// an exec probe passes, a gRPC probe is a TCP connect to its port.
func (k *Kubelet) runProbe(ctx context.Context, r *podRun, c corev1.Container, pr *corev1.Probe, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ip := r.ip.String()
	switch {
	case pr.TCPSocket != nil, pr.GRPC != nil:
		var port int32
		var err error
		if pr.TCPSocket != nil {
			port, err = resolvePort(c, pr.TCPSocket.Port)
		} else {
			port = pr.GRPC.Port
		}
		if err != nil {
			return err
		}
		conn, err := k.rt.Dial(ctx, r.node, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))))
		if err != nil {
			return err
		}
		return conn.Close()
	case pr.HTTPGet != nil:
		return k.httpProbe(ctx, r, c, pr.HTTPGet)
	}
	return nil
}

func (k *Kubelet) httpProbe(ctx context.Context, r *podRun, c corev1.Container, g *corev1.HTTPGetAction) error {
	port, err := resolvePort(c, g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = r.ip.String()
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(int(port))), Path: g.Path}
	if u.Path == "" {
		u.Path = "/"
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return k.rt.Dial(ctx, r.node, network, addr)
		},
		// Like the kubelet, an HTTPS probe does not verify the certificate.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/flowlb-lab")
	for _, h := range g.HTTPHeaders {
		if h.Name == "Host" {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe %s: %d", u.String(), resp.StatusCode)
	}
	return nil
}
