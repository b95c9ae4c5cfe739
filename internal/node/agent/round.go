package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// The timing of the agent's rounds, exported for bench/agentacks, whose
// simulated agents move between servers as the agent does.
const (
	// MinBackoff and MaxBackoff bound the jittered wait after a round
	// in which no server answered.
	MinBackoff = 50 * time.Millisecond
	MaxBackoff = 5 * time.Second
	// HandshakeTimeout bounds connecting and saying hello to one server,
	// and one round's name lookups, so that a dead replica costs little.
	HandshakeTimeout = 500 * time.Millisecond
	// MaxHandshake bounds the handshake's wait as it grows: each
	// handshake that gets no answer in time doubles the wait for the
	// next, until a useful session. When a replica dies, its agents
	// move to the others all at once, and the TLS handshakes queue
	// there: a fixed 500 ms gave up on handshakes that were under way
	// and started them again elsewhere, which kept the queue full, and
	// so did a bound of 5 s when the queue took longer to drain. 20 s is
	// gRPC's own bound on connecting.
	MaxHandshake = 20 * time.Second
	// UsefulAfter: a session that lasted this long was useful even if the
	// server sent nothing (the agent was up to date).
	UsefulAfter = time.Second
)

// round tries the servers one after the other, in a shuffled order with
// avoid (the server just lost) last, until a session that was useful
// ends: it returns true and that server. A server that does not answer,
// or ends the stream before it was useful, passes the turn to the next
// at once; false means none was useful, the last error says why.
func (a *Agent) round(ctx context.Context, avoid string) (bool, string, error) {
	addrs := a.candidates(ctx, avoid)
	if len(addrs) == 0 {
		return false, "", errors.New("no server address resolved")
	}
	var err error
	for _, addr := range addrs {
		var useful bool
		useful, err = a.session(ctx, addr)
		if ctx.Err() != nil {
			return false, addr, err
		}
		if useful {
			a.handshakeWait.Store(0)
			a.log.Warn("agent stream ended; flows kept, connecting to the next server", "server", addr, "err", err)
			return true, addr, err
		}
		a.log.Debug("server did not answer", "server", addr, "err", err)
	}
	return false, "", err
}

// candidates resolves every configured entry and orders the addresses
// for one round. An entry whose lookup fails keeps its last resolution.
func (a *Agent) candidates(ctx context.Context, avoid string) []string {
	entries := a.cfg.Servers
	if a.cfg.Server != "" {
		entries = append(slices.Clone(entries), a.cfg.Server)
	}
	lookup := a.cfg.LookupHost
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	results := make([][]string, len(entries))
	errs := make([]error, len(entries))
	var wg sync.WaitGroup
	for i, e := range entries {
		wg.Go(func() { results[i], errs[i] = resolve(ctx, e, lookup) })
	}
	wg.Wait()
	var addrs []string
	for i, e := range entries {
		if errs[i] != nil {
			a.log.Warn("server address not resolved; using the last resolution", "server", e, "err", errs[i], "last", a.resolved[e])
			results[i] = a.resolved[e]
		}
		a.resolved[e] = results[i]
		addrs = append(addrs, results[i]...)
	}
	return order(addrs, avoid, rand.Shuffle)
}

// resolve turns one host:port entry into addresses (an IP host is its
// own address).
func resolve(ctx context.Context, entry string, lookup func(context.Context, string) ([]string, error)) ([]string, error) {
	host, port, err := net.SplitHostPort(entry)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", entry, err)
	}
	hosts := []string{host}
	if _, err := netip.ParseAddr(host); err != nil {
		if hosts, err = lookup(ctx, host); err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, net.JoinHostPort(h, port))
	}
	return out, nil
}

// order removes duplicates, shuffles, and puts avoid last.
func order(addrs []string, avoid string, shuffle func(n int, swap func(i, j int))) []string {
	out := slices.Compact(slices.Sorted(slices.Values(addrs)))
	shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if i := slices.Index(out, avoid); i >= 0 {
		out = append(append(out[:i:i], out[i+1:]...), avoid)
	}
	return out
}

// ParseServers reads --server values: each a comma-separated list of
// host:port entries (spaces and empty entries ignored).
func ParseServers(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e == "" {
				continue
			}
			if host, port, err := net.SplitHostPort(e); err != nil || host == "" || port == "" {
				return nil, fmt.Errorf("server %q: want host:port", e)
			}
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no server given")
	}
	return out, nil
}
