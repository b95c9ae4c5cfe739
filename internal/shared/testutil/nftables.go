package testutil

import (
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TakeNftablesTable stands for another process taking an nftables table
// in the calling thread's network namespace: in one transaction it
// deletes the table of that family and name and makes an empty one that
// its own netlink socket owns (NFT_TABLE_F_OWNER), so that no other
// socket may read, change or delete it. release closes the socket, and
// the kernel deletes the table with it.
func TakeNftablesTable(t testing.TB, family byte, name string) (release func()) {
	t.Helper()
	const tableFlagOwner = 0x2 // NFT_TABLE_F_OWNER
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		t.Fatal(err)
	}
	attrs := func(extra ...netlink.Attribute) []byte {
		b, err := netlink.MarshalAttributes(append([]netlink.Attribute{{Type: unix.NFTA_TABLE_NAME, Data: []byte(name + "\x00")}}, extra...))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	batch := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}
	fam := []byte{family, unix.NFNETLINK_V0, 0, 0}
	flags := binary.BigEndian.AppendUint32(nil, tableFlagOwner)
	msgs := []netlink.Message{
		{Header: netlink.Header{Type: unix.NFNL_MSG_BATCH_BEGIN, Flags: netlink.Request}, Data: batch},
		{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_DELTABLE), Flags: netlink.Request | netlink.Acknowledge},
			Data: append(fam, attrs()...)},
		{Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWTABLE), Flags: netlink.Request | netlink.Acknowledge | netlink.Create},
			Data: append(fam, attrs(netlink.Attribute{Type: unix.NFTA_TABLE_FLAGS, Data: flags})...)},
		{Header: netlink.Header{Type: unix.NFNL_MSG_BATCH_END, Flags: netlink.Request}, Data: batch},
	}
	if _, err := c.SendMessages(msgs); err != nil {
		c.Close()
		t.Fatal(err)
	}
	for acks := 0; acks < 2; {
		replies, err := c.Receive()
		if err != nil {
			c.Close()
			t.Fatalf("take table %s: %v", name, err)
		}
		acks += len(replies)
	}
	closed := false
	release = func() {
		if !closed {
			closed = true
			c.Close()
		}
	}
	t.Cleanup(release)
	return release
}
