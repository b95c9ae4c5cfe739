package openstack

import (
	"fmt"

	"github.com/flowlb/flowlb/internal/lab"
	"github.com/flowlb/flowlb/internal/lab/barbican"
)

// BarbicanPort is where Barbican's API (the key manager, Octavia's
// certificate store) listens on the lab's control address.
const BarbicanPort = barbican.Port

// Barbican's service user in Keystone: its keystonemiddleware validates
// tokens as this user.
const (
	BarbicanUser     = barbican.User
	BarbicanPassword = barbican.Password
)

// startBarbican starts Barbican's API (Debian's barbican-api,
// internal/lab/barbican) in the fabric namespace, its configuration,
// database and logs under <bed>/barbican. It needs Keystone only once a
// request comes (setupKeystone registers its user and endpoint).
func (c *Cloud) startBarbican() {
	c.t.Helper()
	b, err := barbican.New(barbican.Config{Dir: c.path("barbican"),
		Listen: fmt.Sprintf("%s:%d", lab.ControlAddr, BarbicanPort), URL: c.BarbicanURL,
		KeystoneURL: c.KeystoneURL, Project: ServiceProject, User: BarbicanUser, Password: BarbicanPassword})
	if err != nil {
		c.t.Fatal(err)
	}
	c.barbican = b
	argv, env := b.Argv()
	c.start(c.Lab.Fabric(), "barbican", env, argv...)
}

// waitBarbican waits until Barbican's API answers its versions (the
// time since its start is an upper bound: the first try comes once
// Keystone is set up).
func (c *Cloud) waitBarbican() {
	c.t.Helper()
	c.barbican.Wait(c.t, c.HTTP)
}
