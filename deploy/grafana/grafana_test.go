// Package grafana holds the Grafana dashboard of flowlb's metrics
// (flowlb.json); its test checks that the dashboard names only metrics
// flowlb exports.
package grafana

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlb/flowlb/internal/server/apimetrics"
)

type dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricName = regexp.MustCompile(`flowlb_[a-z0-9_]+`)

// exported are the metric names flowlb's code defines: the names written
// out in its (non-test) Go files, and the statistics series, whose names
// are built from the level.
func exported(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, dir := range []string{"../../internal", "../../cmd"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range regexp.MustCompile(`"(flowlb_[a-z0-9_]+)"`).FindAllSubmatch(b, -1) {
				names[string(m[1])] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, level := range []string{apimetrics.StatsMember, apimetrics.StatsListener, apimetrics.StatsLoadBalancer} {
		var r recording
		if err := apimetrics.RegisterStats(&r, level, nil, nil); err != nil {
			t.Fatal(err)
		}
		ch := make(chan *prometheus.Desc, 64)
		for _, c := range r.cs {
			c.Describe(ch)
		}
		close(ch)
		for d := range ch {
			if m := fqName.FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = true
			}
		}
	}
	return names
}

// recording is a Registerer that keeps what is registered.
type recording struct{ cs []prometheus.Collector }

func (r *recording) Register(c prometheus.Collector) error   { r.cs = append(r.cs, c); return nil }
func (r *recording) MustRegister(cs ...prometheus.Collector) { r.cs = append(r.cs, cs...) }
func (r *recording) Unregister(prometheus.Collector) bool    { return false }

// TestDashboardNamesExportedMetrics: flowlb.json is a Grafana dashboard
// whose panels fit its 24-column grid without overlapping, read the
// chosen Prometheus data source, and query only metrics flowlb exports
// (a histogram by its _bucket, _sum and _count series).
func TestDashboardNamesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("flowlb.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid or panels: %+v", d)
	}
	names := exported(t)
	if !names["flowlb_fanout_realize_seconds"] || !names["flowlb_listener_connections_total"] {
		t.Fatalf("the exported names were not found (%d names)", len(names))
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q reads data source %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: grid position %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, m := range metricName.FindAllString(q.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(m, suffix); ok && names[s] {
						base = s
					}
				}
				if !names[base] {
					t.Errorf("panel %q queries %s, which flowlb does not export", p.Title, m)
				}
			}
		}
	}
}
