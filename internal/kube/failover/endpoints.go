package failover

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// parseEndpoints checks the replicas' URLs and returns them without a
// trailing slash. Requests are moved between replicas by scheme and host
// only, so every URL must carry the same path (or none).
func parseEndpoints(raw []string) ([]*url.URL, error) {
	if len(raw) == 0 {
		return nil, errors.New("no API endpoint given")
	}
	endpoints := make([]*url.URL, 0, len(raw))
	seen := map[string]bool{}
	for _, r := range raw {
		u, err := parseEndpoint(r)
		if err != nil {
			return nil, err
		}
		origin := u.Scheme + "://" + u.Host
		if seen[origin] {
			return nil, fmt.Errorf("API endpoint %q given twice", r)
		}
		seen[origin] = true
		if len(endpoints) > 0 && endpoints[0].Path != u.Path {
			return nil, fmt.Errorf("API endpoints differ in path: %q has %q, %q has %q; give every replica with the same base path",
				endpoints[0].String(), endpoints[0].Path, u.String(), u.Path)
		}
		endpoints = append(endpoints, u)
	}
	return endpoints, nil
}

func parseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("API endpoint %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("API endpoint %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("API endpoint %q: no host", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("API endpoint %q: only scheme, host, port and path are allowed", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}
