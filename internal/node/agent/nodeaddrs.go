package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"
)

// NodePortAddresses picks, among a node's addresses, those that serve
// node ports, as kube-proxy's --nodeport-addresses does: with no cidrs
// every address but loopback ones, else those within one of cidrs.
// Sorted, without repeats.
func NodePortAddresses(addrs []netip.Addr, cidrs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case !a.IsValid() || a.IsUnspecified():
		case len(cidrs) == 0 && !a.IsLoopback():
			out = append(out, a)
		case slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }):
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return slices.Compact(out)
}

// InterfaceAddresses lists the addresses of the interfaces of the
// agent's network namespace.
func InterfaceAddresses() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

// WatchNodePortAddresses gives set the node's node-port addresses now
// and again whenever they change, looking every interval until ctx ends:
// an address added to the node serves node ports within that time.
func WatchNodePortAddresses(ctx context.Context, interval time.Duration, cidrs []netip.Prefix, set func([]netip.Addr) error, log *slog.Logger) error {
	var last []netip.Addr
	update := func() error {
		addrs, err := InterfaceAddresses()
		if err != nil {
			return err
		}
		now := NodePortAddresses(addrs, cidrs)
		if last != nil && slices.Equal(now, last) {
			return nil
		}
		if err := set(now); err != nil {
			return err
		}
		log.Info("node-port addresses", "addresses", now)
		last = now
		return nil
	}
	if err := update(); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := update(); err != nil {
					log.Warn("node-port addresses not updated", "err", err)
				}
			}
		}
	}()
	return nil
}
