package lbaas

// Capability is one provider flavor or availability-zone capability.
type Capability struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Provider realizes load balancer trees. Octavia's provider drivers are the
// model: the API commits the change, the provider makes it real and reports
// completion, which moves the tree out of PENDING_*.
type Provider interface {
	Name() string
	Description() string
	// Check refuses, with an Unsupported error, a tree the provider
	// cannot serve. It sees the tree as it would be after the change.
	Check(t *Tree) error
	// Realize makes the load balancer's committed change real and calls
	// done once, when it is (err nil) or cannot be. change is the change's
	// log entry (0: a change from before the log, realized with whatever
	// is committed now). It must not block.
	Realize(lbID string, change int64, done func(error))
	FlavorCapabilities() []Capability
	AZCapabilities() []Capability
	// CheckFlavor validates a flavor profile's flavor_data (a JSON object
	// of provider-specific options).
	CheckFlavor(data map[string]any) error
	// CheckAZ validates an AZ profile's availability_zone_data.
	CheckAZ(data map[string]any) error
}
