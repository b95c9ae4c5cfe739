package neutronapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/flowlb/flowlb/internal/server/jsondoc"
	"github.com/flowlb/flowlb/internal/server/store"
)

// A deployment mark is a Neutron tag (the standard-attr tag extension)
// on every VIP port flowlb makes, naming the flowlb deployment that made
// it: two deployments on one Neutron each delete and reuse only their
// own ports, and each sweeps only its own orphans.

// markPrefix starts every deployment mark; what follows is the id.
const markPrefix = "flowlb-deployment="

// KindDeployment holds the deployment's identity, one record written
// once, so that every replica of one database agrees on it.
const KindDeployment store.Kind = "deployment"

// deploymentRecord is the id of the one KindDeployment record.
const deploymentRecord = "neutron"

// validID keeps a deployment id a short tag without the comma that
// Neutron's tag filters split on.
var validID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Mark is the tag of deployment id on its VIP ports.
func Mark(id string) string { return markPrefix + id }

// marks sorts a port's tags: whether it carries mark, and whether it
// carries any deployment's mark.
func marks(tags []string, mark string) (ours, marked bool) {
	for _, t := range tags {
		if t == mark {
			ours = true
		}
		if strings.HasPrefix(t, markPrefix) {
			marked = true
		}
	}
	return ours, marked
}

// CheckDeploymentID refuses an id that cannot be a mark.
func CheckDeploymentID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("neutron deployment id %q: use 1 to 64 letters, digits, '.', '_' or '-'", id)
	}
	return nil
}

// DeploymentID is the deployment's id: the one st holds, written with a
// fresh random id by whichever replica first asks.
func DeploymentID(ctx context.Context, st store.Store) (string, error) {
	// Two replicas starting at once may both insert; the loser's insert
	// conflicts and its second round reads the winner's.
	for range 2 {
		var id string
		_, err := st.Update(ctx, func(tx store.Tx) error {
			id = ""
			rec, err := tx.Get(KindDeployment, deploymentRecord)
			if err == nil {
				var d struct {
					ID string `json:"id"`
				}
				if err := jsondoc.Unmarshal(rec.Data, &d); err != nil {
					return fmt.Errorf("decode the deployment's id: %w", err)
				}
				id = d.ID
				return CheckDeploymentID(id)
			}
			if !errors.Is(err, store.ErrNotFound) {
				return err
			}
			b := make([]byte, 8)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			id = hex.EncodeToString(b)
			return tx.Insert(store.Record{Kind: KindDeployment, ID: deploymentRecord, Data: []byte(`{"id":"` + id + `"}`)})
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("the deployment's id in the database: %w", err)
		}
		return id, nil
	}
	return "", errors.New("the deployment's id in the database: conflicting inserts")
}
