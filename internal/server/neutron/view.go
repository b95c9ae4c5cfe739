package neutron

import (
	"encoding/json"

	"github.com/flowlb/flowlb/internal/server/identity"
	"github.com/flowlb/flowlb/internal/server/store"
)

// view is what one request may see: all for an admin; otherwise its own
// objects, plus shared and external networks and their subnets.
type view struct {
	tx   store.ReadTx
	c    identity.Caller
	nets map[string]Network
}

func (v *view) network(id string) (Network, bool) {
	if n, ok := v.nets[id]; ok {
		return n, true
	}
	n, err := getNetwork(v.tx, id)
	if err != nil {
		return Network{}, false
	}
	v.nets[id] = n
	return n, true
}

func (v *view) netVisible(n Network) bool {
	return v.c.IsAdmin || n.ProjectID == v.c.ProjectID || n.Shared || n.RouterExternal
}

// owns reports whether the caller may change an object of project.
func (v *view) owns(project string) bool { return v.c.IsAdmin || project == v.c.ProjectID }

// object decodes a record into its API object if the caller may see it.
func (v *view) object(r *resource, rec store.Record) (any, string, bool, error) {
	switch r.kind {
	case store.KindNetwork:
		var n Network
		if err := json.Unmarshal(rec.Data, &n); err != nil {
			return nil, "", false, err
		}
		v.nets[n.ID] = n
		return n, n.ProjectID, v.netVisible(n), nil
	case store.KindSubnet:
		if rec.ProjectID == ipamProject {
			return nil, "", false, nil
		}
		d, err := decodeSubnet(rec)
		if err != nil {
			return nil, "", false, err
		}
		if v.owns(d.ProjectID) {
			return d.Subnet, d.ProjectID, true, nil
		}
		n, ok := v.network(d.NetworkID)
		return d.Subnet, d.ProjectID, ok && v.netVisible(n), nil
	case store.KindFloatingIP:
		return v.fipObject(rec)
	case store.KindSecurityGroup:
		return v.sgObject(rec)
	case store.KindSecurityGroupRule:
		return v.ruleObject(rec)
	default:
		var d portDoc
		if err := json.Unmarshal(rec.Data, &d); err != nil {
			return nil, "", false, err
		}
		return d.Port, d.ProjectID, v.owns(d.ProjectID), nil
	}
}

func (v *view) get(r *resource, id string) (any, string, error) {
	rec, err := v.tx.Get(r.kind, id)
	if isNotFound(err) {
		return nil, "", r.notFound(id)
	}
	if err != nil {
		return nil, "", err
	}
	obj, project, ok, err := v.object(r, rec)
	if err != nil {
		return nil, "", err
	}
	if !ok {
		return nil, "", r.notFound(id)
	}
	return obj, project, nil
}
