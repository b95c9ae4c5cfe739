// Package bgp is the agent's BGP speaker: it peers with the routers of
// its configuration and advertises the VIPs its node can serve (what
// internal/node/announce decides), with the attributes of their range, as
// host routes or, where a range asks for it and every address in it is
// served, as the range itself. The speaker is GoBGP used as a library,
// with its own BFD for fast failure detection and graceful restart so
// that an agent restart withdraws nothing. docs/kubernetes.md describes
// it and operations.md its configuration.
package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Config is the speaker's configuration (`flowlb agent --bgp-config`).
type Config struct {
	// ASN is the node's autonomous system number.
	ASN uint32 `json:"asn"`
	// RouterID defaults to the first peer's local IPv4 address, else
	// the node's first IPv4 address.
	RouterID string `json:"router-id,omitempty"`
	// ListenPort: 0 (the default) listens nowhere, the speaker
	// connects to its peers; a port also accepts their connections.
	ListenPort int `json:"listen-port,omitempty"`
	// NextHops per family; empty: the session's local address for its
	// own family, and for the other family the node's global address
	// on the interface holding it.
	NextHops NextHops `json:"next-hops,omitempty"`
	Peers    []Peer   `json:"peers"`
	// Ranges give the VIPs within them attributes, and aggregation.
	Ranges []Range `json:"ranges,omitempty"`
}

// NextHops are the next hops advertised per family.
type NextHops struct {
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
}

// Peer is one router.
type Peer struct {
	Address string `json:"address"`
	ASN     uint32 `json:"asn"`
	// Port of the router's BGP (179).
	Port int `json:"port,omitempty"`
	// Password for TCP MD5 signatures (RFC 2385); PasswordFile reads
	// it from a file (a Secret's), which wins.
	Password     string `json:"password,omitempty"`
	PasswordFile string `json:"password-file,omitempty"`
	// SourceAddress is the local address of the session.
	SourceAddress string `json:"source-address,omitempty"`
	// Multihop is the TTL of an eBGP session to a router that is not
	// on a shared link (0: directly connected).
	Multihop int `json:"multihop,omitempty"`
	// HoldTime (default 9s) and Keepalive (a third of it).
	HoldTime  Duration `json:"hold-time,omitempty"`
	Keepalive Duration `json:"keepalive,omitempty"`
	// Families advertised on the session: ipv4, ipv6 (default both).
	Families []string `json:"families,omitempty"`
	BFD      BFD      `json:"bfd,omitempty"`
	// GracefulRestart: on by default (restart time 120 s), so that the
	// router keeps the routes while the agent restarts.
	GracefulRestart *GracefulRestart `json:"graceful-restart,omitempty"`
}

// BFD is RFC 5880 asynchronous mode, single hop, from the speaker.
type BFD struct {
	Enabled bool `json:"enabled,omitempty"`
	// MinRx and MinTx default to 300 ms, Multiplier to 3: a dead node is
	// detected by the router within 900 ms, and a node or router whose
	// process stalls for less than that under load keeps its session.
	MinRx      Duration `json:"min-rx,omitempty"`
	MinTx      Duration `json:"min-tx,omitempty"`
	Multiplier int      `json:"multiplier,omitempty"`
}

// GracefulRestart is RFC 4724 as the restarting speaker.
type GracefulRestart struct {
	Enabled     bool     `json:"enabled"`
	RestartTime Duration `json:"restart-time,omitempty"`
}

// Range gives the VIPs within CIDR their attributes. A VIP takes the
// most specific range holding it.
type Range struct {
	CIDR        string   `json:"cidr"`
	Communities []string `json:"communities,omitempty"`
	// LocalPreference is sent to iBGP peers only (RFC 4271); 0: none.
	LocalPreference uint32 `json:"local-preference,omitempty"`
	// Aggregate advertises the range itself instead of its host routes
	// while every address in it is served by this node.
	Aggregate bool `json:"aggregate,omitempty"`
}

// Duration reads "300ms", "9s" (or a number of seconds).
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		*d = Duration(n * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// Load reads a configuration file.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(b)
}

// Parse reads a configuration and checks it.
func Parse(b []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, err
	}
	if err := c.Check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Check refuses a configuration the speaker cannot run.
func (c Config) Check() error {
	var errs []error
	if c.ASN == 0 {
		errs = append(errs, errors.New("asn: required"))
	}
	if c.RouterID != "" {
		if a, err := netip.ParseAddr(c.RouterID); err != nil || !a.Is4() {
			errs = append(errs, fmt.Errorf("router-id %q: an IPv4 address", c.RouterID))
		}
	}
	if c.NextHops.IPv4 != "" {
		if a, err := netip.ParseAddr(c.NextHops.IPv4); err != nil || !a.Is4() {
			errs = append(errs, fmt.Errorf("next-hops.ipv4 %q: an IPv4 address", c.NextHops.IPv4))
		}
	}
	if c.NextHops.IPv6 != "" {
		if a, err := netip.ParseAddr(c.NextHops.IPv6); err != nil || !a.Is6() || a.Is4In6() {
			errs = append(errs, fmt.Errorf("next-hops.ipv6 %q: an IPv6 address", c.NextHops.IPv6))
		}
	}
	if len(c.Peers) == 0 {
		errs = append(errs, errors.New("peers: at least one"))
	}
	for i, p := range c.Peers {
		if _, err := netip.ParseAddr(p.Address); err != nil {
			errs = append(errs, fmt.Errorf("peers[%d].address: %w", i, err))
		}
		if p.ASN == 0 {
			errs = append(errs, fmt.Errorf("peers[%d].asn: required", i))
		}
		if p.SourceAddress != "" {
			if _, err := netip.ParseAddr(p.SourceAddress); err != nil {
				errs = append(errs, fmt.Errorf("peers[%d].source-address: %w", i, err))
			}
		}
		if p.Multihop < 0 || p.Multihop > 255 {
			errs = append(errs, fmt.Errorf("peers[%d].multihop: 0-255", i))
		}
		if h := time.Duration(p.HoldTime); h != 0 && h < 3*time.Second {
			errs = append(errs, fmt.Errorf("peers[%d].hold-time: 0 or at least 3s (RFC 4271)", i))
		}
		for _, f := range p.Families {
			if f != "ipv4" && f != "ipv6" {
				errs = append(errs, fmt.Errorf("peers[%d].families: %q is not ipv4 or ipv6", i, f))
			}
		}
		if m := p.BFD.Multiplier; m < 0 || m > 255 {
			errs = append(errs, fmt.Errorf("peers[%d].bfd.multiplier: 1-255", i))
		}
	}
	for i, r := range c.Ranges {
		if p, err := r.prefix(); err != nil {
			errs = append(errs, fmt.Errorf("ranges[%d].cidr: %w", i, err))
		} else if r.Aggregate && p.Addr().BitLen()-p.Bits() > maxAggregateBits {
			errs = append(errs, fmt.Errorf("ranges[%d]: aggregate holds at most %d addresses", i, 1<<maxAggregateBits))
		}
		for _, s := range r.Communities {
			if _, err := ParseCommunity(s); err != nil {
				errs = append(errs, fmt.Errorf("ranges[%d].communities: %w", i, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (r Range) prefix() (netip.Prefix, error) {
	p, err := netip.ParsePrefix(r.CIDR)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Masked(), nil
}

// ParseCommunity reads a standard community, "ASN:value" (RFC 1997).
func ParseCommunity(s string) (uint32, error) {
	hi, lo, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("community %q: want ASN:value", s)
	}
	a, err1 := strconv.ParseUint(hi, 10, 16)
	b, err2 := strconv.ParseUint(lo, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("community %q: two numbers of 0-65535", s)
	}
	return uint32(a)<<16 | uint32(b), nil
}

// families of a peer, defaulted.
func (p Peer) families() (v4, v6 bool) {
	if len(p.Families) == 0 {
		return true, true
	}
	return slices.Contains(p.Families, "ipv4"), slices.Contains(p.Families, "ipv6")
}
