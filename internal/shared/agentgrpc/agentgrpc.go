// Package agentgrpc holds the gRPC transport settings the server and the
// node agents share for the agent stream.
//
// The flow-control windows are fixed. With gRPC's default (a 64 KiB
// window grown by its bandwidth-delay estimator), every message a side
// receives after a quiet spell makes it send a PING and the other side
// answer it: a change fanned out to N agents costs N updates, N acks,
// and about as many pings and ping answers again, each a TLS record and
// a write on its own. Fixed windows turn the estimator off: at 5,000
// agents on 3 replicas that took the servers' CPU per change from
// 470–490 ms to 305–318 ms (docs/benchmarks.md). The windows are large
// enough for a full snapshot at a LAN's or a region's round trip, and
// bound what a peer may leave unread in memory.
package agentgrpc

import "google.golang.org/grpc"

const (
	// NodeStreamWindow and NodeConnWindow are what the server may send
	// a node before the node has read it: snapshots of every service.
	NodeStreamWindow = 8 << 20
	NodeConnWindow   = 16 << 20
	// ServerWindow is what a node may send the server unread, per
	// stream and per connection: acks, health reports and statistics,
	// each at most a MiB.
	ServerWindow = 1 << 20
)

// ServerOptions are the agent stream's server's transport options.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(ServerWindow), grpc.InitialConnWindowSize(ServerWindow)}
}

// DialOptions are a node's transport options to the server.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(NodeStreamWindow), grpc.WithInitialConnWindowSize(NodeConnWindow)}
}
