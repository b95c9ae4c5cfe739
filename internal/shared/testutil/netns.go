package testutil

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// InNewNetns runs fn on a locked OS thread inside a fresh network
// namespace with loopback up, and returns when fn has. The thread is
// never unlocked: it ends with its goroutine, and the namespace with it.
// A failure to make the namespace fails t (t.Error) and skips fn.
func InNewNetns(t testing.TB, fn func(ns netns.NsHandle)) {
	t.Helper()
	RequireRoot(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			t.Error(err)
			return
		}
		fn(ns)
	}()
	<-done
}
