package nftables

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/flowlb/flowlb/internal/node/dataplane"
)

// netfilterListeners counts the netlink sockets of the calling thread's
// namespace that hear nf_tables notifications (/proc/net/netlink lists
// each socket's first 32 groups as a bit mask).
func netfilterListeners(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/thread-self/net/netlink")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[1] != strconv.Itoa(unix.NETLINK_NETFILTER) {
			continue
		}
		groups, err := strconv.ParseUint(fields[3], 16, 32)
		if err != nil {
			t.Fatalf("groups %q: %v", fields[3], err)
		}
		if groups&(1<<(unix.NFNLGRP_NFTABLES-1)) != 0 {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLargeTransactionUnheard: on the real kernel, a transaction of many
// elements is sent with no socket of the namespace in the notification
// group (so the kernel builds no notification per element), the monitor
// hears again afterwards, and a change another process makes while it
// does not hear is still found: the check that follows reads everything
// and repairs it.
func TestLargeTransactionUnheard(t *testing.T) {
	inNetns(t, func(ns netns.NsHandle) {
		dp, err := New(int(ns), "n1")
		if err != nil {
			t.Fatal(err)
		}
		defer dp.Remove()
		if got := netfilterListeners(t); got != 1 {
			t.Fatalf("%d sockets hear nf_tables notifications, want the monitor's", got)
		}
		ctx := context.Background()
		var during []int
		dp.whileUnheard = func() { during = append(during, netfilterListeners(t)) }

		// 20 services of 10 backends: about 1,250 elements.
		tab := services(20)
		if err := dp.Sync(ctx, tab); err != nil {
			t.Fatal(err)
		}
		if len(during) != 1 || during[0] != 0 {
			t.Fatalf("listeners while the load was sent: %v, want one transaction with none", during)
		}
		if got := netfilterListeners(t); got != 1 {
			t.Fatalf("%d sockets hear notifications after the load, want 1", got)
		}
		// Nothing else committed meanwhile: the check reads the structure
		// (the generation moved), not every element.
		if check, err := dp.Verify(ctx); err != nil || check.Scope != scopeStructure || check.Repairs() != 0 {
			t.Fatalf("check after a large transaction of its own: %+v, %v", check, err)
		}
		// A small change stays heard.
		one := services(21)
		if err := dp.Sync(ctx, one); err != nil {
			t.Fatal(err)
		}
		if len(during) != 1 {
			t.Fatalf("a change of one service was sent unheard")
		}

		// Another's change while nothing hears it: found by the
		// generation, and the next check is a full one.
		dp.whileUnheard = func() {
			nft(t, "add", "set", "ip", "flowlb", "foreign", "{ type ipv4_addr; }")
		}
		if err := dp.Sync(ctx, services(60)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-dp.Drift():
		case <-time.After(time.Second):
			t.Fatal("no request for a check after a change unheard")
		}
		check, err := dp.Verify(ctx)
		if err != nil || check.Scope != scopeFull || check.Repaired[dataplane.Set] != 1 {
			t.Fatalf("check after another's change unheard: %+v, %v", check, err)
		}
		// Heard again: another's change afterwards is notified.
		nft(t, "add", "set", "ip", "flowlb", "foreign2", "{ type ipv4_addr; }")
		select {
		case <-dp.Drift():
		case <-time.After(time.Second):
			t.Fatal("no notification within 1 s of a change after the large transaction")
		}
	})
}
