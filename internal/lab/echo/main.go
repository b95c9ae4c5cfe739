package echo

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// Main is the echo server's command line, shared by `flowlb lab echo` and
// test binaries that re-exec themselves as echo servers. It serves until
// SIGTERM or SIGINT.
func Main(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var tcp, udp, httpPorts, proxyHTTP, httpsPorts, auto string
	fs.StringVar(&cfg.Name, "name", "", "name to answer with (the pod name)")
	fs.StringVar(&cfg.Bind, "bind", "", "listen address (default: every address, IPv4 and IPv6)")
	fs.StringVar(&tcp, "tcp", "8080", "TCP line-protocol ports, comma separated")
	fs.StringVar(&udp, "udp", "9090", "UDP ports, comma separated")
	fs.StringVar(&httpPorts, "http", "80", "HTTP ports, comma separated")
	fs.StringVar(&proxyHTTP, "proxy-http", "", "HTTP ports that read a PROXY protocol header first (v1 or v2) and answer with the addresses it names")
	fs.StringVar(&httpsPorts, "https", "", "HTTPS ports (a self-signed certificate made at start; h2 or HTTP/1.1), answering with the HTTP version and the client certificate's CN in headers")
	fs.StringVar(&auto, "auto", "", "TCP ports serving HTTP or the line protocol, whichever the client speaks")
	fs.StringVar(&cfg.HealthFile, "health-file", "", "answer HTTP 500 while this file exists")
	fs.StringVar(&cfg.ReadyFile, "ready-file", "", "create this file once listening")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Name == "" {
		h, _ := os.Hostname()
		cfg.Name = h
	}
	var err error
	if cfg.TCP, err = ParsePorts(tcp); err != nil {
		return err
	}
	if cfg.UDP, err = ParsePorts(udp); err != nil {
		return err
	}
	if cfg.HTTP, err = ParsePorts(httpPorts); err != nil {
		return err
	}
	if cfg.Auto, err = ParsePorts(auto); err != nil {
		return err
	}
	if cfg.ProxyHTTP, err = ParsePorts(proxyHTTP); err != nil {
		return err
	}
	if cfg.HTTPS, err = ParsePorts(httpsPorts); err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg.Log.Info("echo server starting", "name", cfg.Name, "tcp", cfg.TCP, "udp", cfg.UDP, "http", cfg.HTTP, "https", cfg.HTTPS, "auto", cfg.Auto)
	return Run(ctx, cfg)
}

// ParsePorts parses "80,8080" (empty means none).
func ParsePorts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("bad port %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}
