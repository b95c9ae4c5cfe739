package lab

import "fmt"

// NodeTableFRR is the FRR configuration of node i exporting its agent's
// announcement table (the routing-table mode: `flowlb agent
// --announce-cidrs` without --bgp-config) to the router, as
// docs/operations.md tells a site running FRR 8.4 (Debian 12) to do:
// zebra imports the table into its RIB (`ip import-table`), bgpd
// redistributes the imported routes. FRR 8.4 imports IPv4 tables only.
func NodeTableFRR(i, table int) FRRConf {
	name := NodeName(i)
	return FRRConf{
		Zebra: fmt.Sprintf("hostname %s\nlog stdout informational\nip import-table %d\n", name, table),
		BGPD: fmt.Sprintf(`hostname %s
log stdout informational
!
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 neighbor %s remote-as %d
 address-family ipv4 unicast
  neighbor %s activate
  redistribute table %d
 exit-address-family
exit
`, name, NodeASN, NodeAddr(i), RouterFabricAddr, RouterASN, RouterFabricAddr, table),
	}
}
