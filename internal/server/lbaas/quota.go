package lbaas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Quota limits a project's objects; nil means "use the default", -1 is
// unlimited.
type Quota struct {
	LoadBalancer  *int `json:"load_balancer"`
	Listener      *int `json:"listener"`
	Member        *int `json:"member"`
	Pool          *int `json:"pool"`
	HealthMonitor *int `json:"health_monitor"`
	L7Policy      *int `json:"l7policy"`
	L7Rule        *int `json:"l7rule"`
}

// quotaResource maps each limited kind to its quota field and the name
// Octavia uses in "Quota has been met for resources: X".
var quotaResources = []struct {
	kind  store.Kind
	name  string
	limit func(*Quota) **int
}{
	{store.KindLoadBalancer, "Load Balancer", func(q *Quota) **int { return &q.LoadBalancer }},
	{store.KindListener, "Listener", func(q *Quota) **int { return &q.Listener }},
	{store.KindPool, "Pool", func(q *Quota) **int { return &q.Pool }},
	{store.KindHealthMonitor, "Health Monitor", func(q *Quota) **int { return &q.HealthMonitor }},
	{store.KindMember, "Member", func(q *Quota) **int { return &q.Member }},
	{store.KindL7Policy, "L7 Policy", func(q *Quota) **int { return &q.L7Policy }},
	{store.KindL7Rule, "L7 Rule", func(q *Quota) **int { return &q.L7Rule }},
}

// effective fills unset limits from defaults; still-unset ones are -1.
func (q Quota) effective(defaults Quota) Quota {
	out := q
	for _, r := range quotaResources {
		p := r.limit(&out)
		if *p == nil {
			*p = *r.limit(&defaults)
		}
		if *p == nil {
			v := -1
			*p = &v
		}
	}
	return out
}

func readQuota(tx store.ReadTx, project string) (Quota, bool, error) {
	rec, err := tx.Get(store.KindQuota, project)
	if errors.Is(err, store.ErrNotFound) {
		return Quota{}, false, nil
	}
	if err != nil {
		return Quota{}, false, err
	}
	var q Quota
	if err := json.Unmarshal(rec.Data, &q); err != nil {
		return Quota{}, false, fmt.Errorf("decode quota %s: %w", project, err)
	}
	return q, true, nil
}

// quotaLock is the key that serialises a project's creates: counting and
// inserting under it, concurrent creates (on any replica) are checked one
// after the other and a quota holds exactly.
func quotaLock(project string) string { return "quota:" + project }

// checkQuotas refuses a change whose new objects would take a project over
// its quota. Only kinds with created objects are counted, under the
// project's lock when any of them is limited. It runs at the end of the
// change, after the load balancer's row lock and the VIP claims, as
// Tx.Lock asks.
func (s *Service) checkQuotas(tx store.Tx, t *Tree) error {
	if len(t.created) == 0 {
		return nil
	}
	newByKind := map[store.Kind]int{}
	for _, o := range t.objects() {
		if t.created[o.base().ID] {
			newByKind[o.kind()]++
		}
	}
	project := t.LB.ProjectID
	q, _, err := readQuota(tx, project)
	if err != nil {
		return err
	}
	eff := q.effective(s.cfg.QuotaDefaults)
	limited := false
	for _, r := range quotaResources {
		limited = limited || (newByKind[r.kind] > 0 && **r.limit(&eff) >= 0)
	}
	if !limited {
		return nil
	}
	if err := tx.Lock(quotaLock(project)); err != nil {
		return err
	}
	// Read again under the lock, which SetQuota takes too: the limit read
	// first may have changed while this waited. (A project without limits
	// takes no lock: a quota set while its creates are in flight binds
	// the creates that start after it.)
	if q, _, err = readQuota(tx, project); err != nil {
		return err
	}
	eff = q.effective(s.cfg.QuotaDefaults)
	for _, r := range quotaResources {
		n := newByKind[r.kind]
		limit := **r.limit(&eff)
		if n == 0 || limit < 0 {
			continue
		}
		have, err := tx.Count(r.kind, store.Filter{ProjectID: project})
		if err != nil {
			return err
		}
		// The LB's own row is already counted when only children are new.
		if have+n > limit {
			return QuotaMet(r.name)
		}
	}
	return nil
}

// QuotaView is a project's quota as Octavia renders it.
type QuotaView struct {
	ProjectID string
	Quota     Quota
}

// GetQuota returns a project's effective quota.
func (s *Service) GetQuota(ctx context.Context, project string) (Quota, error) {
	var q Quota
	err := s.st.View(ctx, func(tx store.ReadTx) error {
		got, _, err := readQuota(tx, project)
		q = got.effective(s.cfg.QuotaDefaults)
		return err
	})
	return q, err
}

// QuotaDefaults returns the configured defaults with -1 for unset limits.
func (s *Service) QuotaDefaults() Quota { return Quota{}.effective(s.cfg.QuotaDefaults) }

// ListQuotas returns the projects that have their own quota.
func (s *Service) ListQuotas(ctx context.Context) ([]QuotaView, error) {
	var out []QuotaView
	err := s.st.View(ctx, func(tx store.ReadTx) error {
		recs, err := tx.List(store.KindQuota, store.Filter{})
		if err != nil {
			return err
		}
		for _, r := range recs {
			var q Quota
			if err := json.Unmarshal(r.Data, &q); err != nil {
				return fmt.Errorf("decode quota %s: %w", r.ID, err)
			}
			out = append(out, QuotaView{ProjectID: r.ID, Quota: q.effective(s.cfg.QuotaDefaults)})
		}
		return nil
	})
	return out, err
}

// SetQuota merges limits into a project's quota (unset fields keep their
// value) and returns the effective result.
func (s *Service) SetQuota(ctx context.Context, project string, limits Quota) (Quota, error) {
	var eff Quota
	_, err := s.st.Update(ctx, func(tx store.Tx) error {
		if err := tx.Lock(quotaLock(project)); err != nil {
			return err
		}
		cur, exists, err := readQuota(tx, project)
		if err != nil {
			return err
		}
		for _, r := range quotaResources {
			if v := *r.limit(&limits); v != nil {
				*r.limit(&cur) = v
			}
		}
		data, err := json.Marshal(cur)
		if err != nil {
			return err
		}
		rec := store.Record{Kind: store.KindQuota, ID: project, ProjectID: project, Data: data}
		if exists {
			err = tx.Update(rec)
		} else {
			err = tx.Insert(rec)
		}
		eff = cur.effective(s.cfg.QuotaDefaults)
		return err
	})
	return eff, err
}

// ResetQuota drops a project's own quota so the defaults apply again.
func (s *Service) ResetQuota(ctx context.Context, project string) error {
	_, err := s.st.Update(ctx, func(tx store.Tx) error {
		err := tx.Delete(store.KindQuota, project)
		if errors.Is(err, store.ErrNotFound) {
			return NotFound("Quota", project)
		}
		return err
	})
	return err
}
