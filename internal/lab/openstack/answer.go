package openstack

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlb/flowlb/internal/lab"
)

// Answer listens on addr (TCP) in the network namespace ns and answers
// every connection with one line, name: a VM's or a member's stand-in
// server, whose answer says who was reached. It stops with the test.
func Answer(t testing.TB, ns, addr, name string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := lab.InNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, name)
			c.Close()
		}
	}()
	return ln
}

// Ask reads the one line an Answer listener at addr says, over a
// connection made by dial, within 3 s.
func Ask(dial func(context.Context, string, string) (net.Conn, error), addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// DialIn dials from the network namespace ns.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := lab.InNS(ns, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
