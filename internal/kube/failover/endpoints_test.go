package failover

import (
	"strings"
	"testing"
)

func TestParseEndpoints(t *testing.T) {
	cases := []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{in: []string{"http://198.18.0.1:9876"}, want: []string{"http://198.18.0.1:9876"}},
		{in: []string{"http://a:9876/", "https://b:9876"}, want: []string{"http://a:9876", "https://b:9876"}},
		{in: []string{"http://a/load-balancer/", "http://b/load-balancer"}, want: []string{"http://a/load-balancer", "http://b/load-balancer"}},
		{in: []string{" http://a:1 ", "http://a:2"}, want: []string{"http://a:1", "http://a:2"}},
		{in: nil, wantErr: "no API endpoint"},
		{in: []string{"http://a/lb", "http://b/octavia"}, wantErr: `API endpoints differ in path: "http://a/lb" has "/lb", "http://b/octavia" has "/octavia"`},
		{in: []string{"http://a", "http://b/lb"}, wantErr: "differ in path"},
		{in: []string{"http://a:1", "http://a:1/"}, wantErr: "given twice"},
		{in: []string{"a:9876"}, wantErr: "scheme must be http or https"},
		{in: []string{"198.18.0.1:9876"}, wantErr: "198.18.0.1:9876"},
		{in: []string{"http:///v2"}, wantErr: "no host"},
		{in: []string{"http://a?x=1"}, wantErr: "only scheme, host, port and path"},
		{in: []string{"http://user:pw@a"}, wantErr: "only scheme, host, port and path"},
		{in: []string{"http://a", ""}, wantErr: "scheme must be"},
	}
	for _, c := range cases {
		got, err := parseEndpoints(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: error %v, want one with %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		var urls []string
		for _, u := range got {
			urls = append(urls, u.String())
		}
		if strings.Join(urls, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q: %q, want %q", c.in, urls, c.want)
		}
	}
}
