package lbaas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flowlb/flowlb/internal/server/store"
)

// Flavor is an operator-defined set of provider options.
type Flavor struct {
	ID              string `json:"id"`
	Name            string `json:"name"`
	Description     string `json:"description"`
	Enabled         bool   `json:"enabled"`
	FlavorProfileID string `json:"flavor_profile_id"`
}

// FlavorProfile holds a provider's flavor_data.
type FlavorProfile struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	ProviderName string `json:"provider_name"`
	FlavorData   string `json:"flavor_data"`
}

// AvailabilityZone is an operator-defined placement, keyed by name.
type AvailabilityZone struct {
	Name                      string `json:"name"`
	Description               string `json:"description"`
	Enabled                   bool   `json:"enabled"`
	AvailabilityZoneProfileID string `json:"availability_zone_profile_id"`
}

// AZProfile holds a provider's availability_zone_data.
type AZProfile struct {
	ID                   string `json:"id"`
	Name                 string `json:"name"`
	ProviderName         string `json:"provider_name"`
	AvailabilityZoneData string `json:"availability_zone_data"`
}

func getDoc[T any](tx store.ReadTx, kind store.Kind, id, resource string) (*T, error) {
	rec, err := tx.Get(kind, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, NotFound(resource, id)
	}
	if err != nil {
		return nil, err
	}
	return decode[T](rec)
}

func readFlavor(tx store.ReadTx, id string) (*Flavor, *FlavorProfile, error) {
	f, err := getDoc[Flavor](tx, store.KindFlavor, id, "Flavor")
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil, Validation("Invalid flavor_id.")
		}
		return nil, nil, err
	}
	p, err := getDoc[FlavorProfile](tx, store.KindFlavorProfile, f.FlavorProfileID, "Flavor profile")
	return f, p, err
}

func readAZ(tx store.ReadTx, name string) (*AvailabilityZone, *AZProfile, error) {
	az, err := getDoc[AvailabilityZone](tx, store.KindAvailabilityZone, name, "Availability Zone")
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil, Validation("Invalid availability zone.")
		}
		return nil, nil, err
	}
	p, err := getDoc[AZProfile](tx, store.KindAZProfile, az.AvailabilityZoneProfileID, "Availability Zone Profile")
	return az, p, err
}

// Catalog is the CRUD of flavors, flavor profiles, availability zones and
// their profiles: global, admin-managed objects with no state machine.
type Catalog struct{ s *Service }

// Catalog returns the flavor and AZ catalog.
func (s *Service) Catalog() Catalog { return Catalog{s} }

// List returns all documents of a catalog kind decoded as T.
func List[T any](ctx context.Context, c Catalog, kind store.Kind) ([]*T, error) {
	var out []*T
	err := c.s.st.View(ctx, func(tx store.ReadTx) error {
		var err error
		out, err = listKind[T](tx, kind, store.Filter{})
		return err
	})
	return out, err
}

// Get returns one catalog document.
func Get[T any](ctx context.Context, c Catalog, kind store.Kind, id, resource string) (*T, error) {
	var out *T
	err := c.s.st.View(ctx, func(tx store.ReadTx) error {
		var err error
		out, err = getDoc[T](tx, kind, id, resource)
		return err
	})
	return out, err
}

func put(tx store.Tx, kind store.Kind, id string, v any, insert bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: kind, ID: id, Data: data}
	if insert {
		err = tx.Insert(rec)
		if errors.Is(err, store.ErrConflict) {
			return Conflict("A %s of %s already exists.", "name", id)
		}
		return err
	}
	return tx.Update(rec)
}

// checkProviderData validates a profile's JSON data with its provider.
func (c Catalog) checkProviderData(provider, data string, az bool) error {
	p, err := c.s.Provider(provider)
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return Validation("the flavor_data/availability_zone_data is not a valid JSON object: %v", err)
	}
	if az {
		return p.CheckAZ(m)
	}
	return p.CheckFlavor(m)
}

// CreateFlavorProfile stores a new flavor profile.
func (c Catalog) CreateFlavorProfile(ctx context.Context, req FlavorProfileRequest) (*FlavorProfile, error) {
	fp := &FlavorProfile{ID: newID()}
	req.apply(fp)
	if err := c.checkProviderData(fp.ProviderName, fp.FlavorData, false); err != nil {
		return nil, err
	}
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error { return put(tx, store.KindFlavorProfile, fp.ID, fp, true) })
	return fp, err
}

// UpdateFlavorProfile changes a flavor profile; one in use cannot change.
func (c Catalog) UpdateFlavorProfile(ctx context.Context, id string, req FlavorProfileRequest) (*FlavorProfile, error) {
	var fp *FlavorProfile
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		var err error
		if fp, err = getDoc[FlavorProfile](tx, store.KindFlavorProfile, id, "Flavor profile"); err != nil {
			return err
		}
		if err := c.profileInUse(tx, store.KindFlavor, id, "Flavor profile"); err != nil {
			return err
		}
		req.apply(fp)
		if err := c.checkProviderData(fp.ProviderName, fp.FlavorData, false); err != nil {
			return err
		}
		return put(tx, store.KindFlavorProfile, id, fp, false)
	})
	return fp, err
}

// profileInUse refuses changing a profile that a flavor or AZ references.
func (c Catalog) profileInUse(tx store.ReadTx, kind store.Kind, profileID, resource string) error {
	recs, err := tx.List(kind, store.Filter{})
	if err != nil {
		return err
	}
	for _, r := range recs {
		m := map[string]any{}
		if err := json.Unmarshal(r.Data, &m); err != nil {
			return err
		}
		if m["flavor_profile_id"] == profileID || m["availability_zone_profile_id"] == profileID {
			return Conflict("%s %s is in use and cannot be modified.", resource, profileID)
		}
	}
	return nil
}

// DeleteFlavorProfile removes an unused flavor profile.
func (c Catalog) DeleteFlavorProfile(ctx context.Context, id string) error {
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		if _, err := getDoc[FlavorProfile](tx, store.KindFlavorProfile, id, "Flavor profile"); err != nil {
			return err
		}
		if err := c.profileInUse(tx, store.KindFlavor, id, "Flavor profile"); err != nil {
			return err
		}
		return tx.Delete(store.KindFlavorProfile, id)
	})
	return err
}

// CreateFlavor stores a new flavor over an existing profile.
func (c Catalog) CreateFlavor(ctx context.Context, req FlavorCreate) (*Flavor, error) {
	f := &Flavor{ID: newID(), Enabled: true, FlavorProfileID: req.FlavorProfileID}
	req.FlavorUpdate.apply(f)
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		if _, err := getDoc[FlavorProfile](tx, store.KindFlavorProfile, f.FlavorProfileID, "Flavor profile"); err != nil {
			if errors.Is(err, ErrNotFound) {
				return Validation("Flavor profile %s not found.", f.FlavorProfileID)
			}
			return err
		}
		if err := uniqueName[Flavor](tx, store.KindFlavor, f.Name, func(o *Flavor) string { return o.Name }); err != nil {
			return err
		}
		return put(tx, store.KindFlavor, f.ID, f, true)
	})
	return f, err
}

func uniqueName[T any](tx store.ReadTx, kind store.Kind, name string, nameOf func(*T) string) error {
	all, err := listKind[T](tx, kind, store.Filter{})
	if err != nil {
		return err
	}
	for _, o := range all {
		if nameOf(o) == name {
			return Conflict("A %s of %s already exists.", "name", name)
		}
	}
	return nil
}

// UpdateFlavor changes name, description or enabled.
func (c Catalog) UpdateFlavor(ctx context.Context, id string, req FlavorUpdate) (*Flavor, error) {
	var f *Flavor
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		var err error
		if f, err = getDoc[Flavor](tx, store.KindFlavor, id, "Flavor"); err != nil {
			return err
		}
		req.apply(f)
		return put(tx, store.KindFlavor, id, f, false)
	})
	return f, err
}

// DeleteFlavor removes a flavor no load balancer uses.
func (c Catalog) DeleteFlavor(ctx context.Context, id string) error {
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		if _, err := getDoc[Flavor](tx, store.KindFlavor, id, "Flavor"); err != nil {
			return err
		}
		lbs, err := listKind[LoadBalancer](tx, store.KindLoadBalancer, store.Filter{})
		if err != nil {
			return err
		}
		for _, lb := range lbs {
			if lb.FlavorID != nil && *lb.FlavorID == id {
				return Conflict("Flavor %s is in use and cannot be modified.", id)
			}
		}
		return tx.Delete(store.KindFlavor, id)
	})
	return err
}

// CreateAZProfile stores a new availability zone profile.
func (c Catalog) CreateAZProfile(ctx context.Context, req AZProfileRequest) (*AZProfile, error) {
	p := &AZProfile{ID: newID()}
	req.apply(p)
	if err := c.checkProviderData(p.ProviderName, p.AvailabilityZoneData, true); err != nil {
		return nil, err
	}
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error { return put(tx, store.KindAZProfile, p.ID, p, true) })
	return p, err
}

// UpdateAZProfile changes an unused availability zone profile.
func (c Catalog) UpdateAZProfile(ctx context.Context, id string, req AZProfileRequest) (*AZProfile, error) {
	var p *AZProfile
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		var err error
		if p, err = getDoc[AZProfile](tx, store.KindAZProfile, id, "Availability Zone Profile"); err != nil {
			return err
		}
		if err := c.profileInUse(tx, store.KindAvailabilityZone, id, "Availability Zone Profile"); err != nil {
			return err
		}
		req.apply(p)
		if err := c.checkProviderData(p.ProviderName, p.AvailabilityZoneData, true); err != nil {
			return err
		}
		return put(tx, store.KindAZProfile, id, p, false)
	})
	return p, err
}

// DeleteAZProfile removes an unused availability zone profile.
func (c Catalog) DeleteAZProfile(ctx context.Context, id string) error {
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		if _, err := getDoc[AZProfile](tx, store.KindAZProfile, id, "Availability Zone Profile"); err != nil {
			return err
		}
		if err := c.profileInUse(tx, store.KindAvailabilityZone, id, "Availability Zone Profile"); err != nil {
			return err
		}
		return tx.Delete(store.KindAZProfile, id)
	})
	return err
}

// CreateAZ stores a new availability zone; its name is its key.
func (c Catalog) CreateAZ(ctx context.Context, req AZCreate) (*AvailabilityZone, error) {
	az := &AvailabilityZone{Name: req.Name, Enabled: true, AvailabilityZoneProfileID: req.AvailabilityZoneProfileID}
	req.AZUpdate.apply(az)
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		if _, err := getDoc[AZProfile](tx, store.KindAZProfile, az.AvailabilityZoneProfileID, "Availability Zone Profile"); err != nil {
			if errors.Is(err, ErrNotFound) {
				return Validation("Availability Zone Profile %s not found.", az.AvailabilityZoneProfileID)
			}
			return err
		}
		return put(tx, store.KindAvailabilityZone, az.Name, az, true)
	})
	return az, err
}

// UpdateAZ changes description or enabled.
func (c Catalog) UpdateAZ(ctx context.Context, name string, req AZUpdate) (*AvailabilityZone, error) {
	var az *AvailabilityZone
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		var err error
		if az, err = getDoc[AvailabilityZone](tx, store.KindAvailabilityZone, name, "Availability Zone"); err != nil {
			return err
		}
		req.apply(az)
		return put(tx, store.KindAvailabilityZone, name, az, false)
	})
	return az, err
}

// DeleteAZ removes an availability zone no load balancer uses.
func (c Catalog) DeleteAZ(ctx context.Context, name string) error {
	_, err := c.s.st.Update(ctx, func(tx store.Tx) error {
		if _, err := getDoc[AvailabilityZone](tx, store.KindAvailabilityZone, name, "Availability Zone"); err != nil {
			return err
		}
		lbs, err := listKind[LoadBalancer](tx, store.KindLoadBalancer, store.Filter{})
		if err != nil {
			return err
		}
		for _, lb := range lbs {
			if lb.AvailabilityZone != nil && *lb.AvailabilityZone == name {
				return Conflict("Availability Zone %s is in use and cannot be modified.", name)
			}
		}
		return tx.Delete(store.KindAvailabilityZone, name)
	})
	if err != nil {
		return fmt.Errorf("delete availability zone %s: %w", name, err)
	}
	return nil
}
