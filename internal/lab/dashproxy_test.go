package lab

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

func TestDashboardProxy(t *testing.T) {
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" token="+r.Header.Get("X-Auth-Token"))
	}))
	defer api.Close()
	u, _ := url.Parse(api.URL)
	proxy := httptest.NewServer(DashboardProxy(u, api.Client().Transport))
	defer proxy.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path, token string
		code        int
		body        string
	}{
		{"/dashboard/", "", 200, "GET /dashboard/ token="},
		{"/dashboard/api/state?x=1", "tok", 200, "GET /dashboard/api/state?x=1 token=tok"},
		{"/dashboard", "", 200, "GET /dashboard token="},
		{"/v2/lbaas/loadbalancers", "tok", 404, "404 page not found\n"},
		{"/dashboardx", "", 404, "404 page not found\n"},
		{"/", "", 302, ""},
	} {
		req, _ := http.NewRequest("GET", proxy.URL+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("X-Auth-Token", tc.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || (tc.code != 302 && string(b) != tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.path, resp.StatusCode, b, tc.code, tc.body)
		}
		if tc.code == 302 && resp.Header.Get("Location") != "/dashboard/" {
			t.Errorf("/ redirects to %q", resp.Header.Get("Location"))
		}
	}
}
