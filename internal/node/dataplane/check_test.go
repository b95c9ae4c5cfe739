package dataplane

import (
	"reflect"
	"testing"
	"time"
)

// TestCheckAdd: repairs add up by kind, the earliest detection wins, and
// scopes join.
func TestCheckAdd(t *testing.T) {
	t0 := time.Unix(100, 0)
	var c Check
	c.Repair(Element, 0, t0, "nothing") // nothing repaired: not recorded
	if c.Repairs() != 0 || !c.Detected.IsZero() || c.What != nil {
		t.Fatalf("a repair of 0 objects was recorded: %+v", c)
	}
	c.Scope = "structure"
	c.Repair(Element, 2, t0.Add(time.Second), "ip flowlb: 2 elements")
	var o Check
	o.Scope = "maps"
	o.Repair(EBPFMap, 1, t0, "services: 1 entry")
	o.Repair(Element, 1, t0.Add(3*time.Second), "")
	c.Add(o)
	want := Check{Scope: "structure+maps", Repaired: map[string]int{Element: 3, EBPFMap: 1}, Detected: t0,
		What: []string{"ip flowlb: 2 elements", "services: 1 entry"}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("merged check %+v, want %+v", c, want)
	}
	if c.Repairs() != 4 {
		t.Errorf("Repairs() = %d, want 4", c.Repairs())
	}
	var e Check
	e.Add(Check{Scope: "generation"})
	if e.Scope != "generation" || e.Repaired != nil {
		t.Errorf("adding to an empty check: %+v", e)
	}
}
