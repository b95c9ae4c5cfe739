package lab

import (
	"bufio"
	"context"
	"strings"
	"time"

	"github.com/flowlb/flowlb/internal/lab/echo"
)

// Ask sends one line over TCP from this host to addr (an echo server, or
// a VIP in front of echo servers) and returns the parsed answer: which pod
// answered and the peer address it saw.
func (h Host) Ask(ctx context.Context, addr string, timeout time.Duration) (echo.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := h.Dial(ctx, "tcp", addr)
	if err != nil {
		return echo.Reply{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return echo.Reply{}, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return echo.Reply{}, err
	}
	return echo.Parse(strings.TrimSpace(line))
}
