// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// What the socket programs (socklb.c) and the socket terminator
// (sockterm.c) share: the keys of a service and a backend, and the
// socket-local storage where connect() records the pair it translated a
// socket to. The terminator's object is loaded with the socket
// programs' sk_lb map in place of its own.

#ifndef SOCKLB_H
#define SOCKLB_H

struct svc_key {
	__u32 vip;   // network order
	__u16 port;  // network order
	__u8 proto;  // IPPROTO_TCP or IPPROTO_UDP
	__u8 pad;
};

struct backend {
	__u32 addr;  // network order
	__u16 port;  // network order
	__u16 pad;
};

// IPv6: the same, with 16-byte addresses.
struct svc_key6 {
	__u32 vip[4];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct backend6 {
	__u32 addr[4];
	__u16 port;
	__u16 pad;
};

// A service and one of its backends.
struct flow_key {
	struct svc_key svc;
	struct backend be;
};

struct flow_key6 {
	struct svc_key6 svc;
	struct backend6 be;
};

#define FAMILY4 4
#define FAMILY6 6

// A socket's own: where connect() sent it. What it carries counts for
// that pair until it connects elsewhere, after close() too (traffic.h).
// The terminator destroys a socket whose pair it is told has ended.
struct sk_lb {
	__u32 family; // FAMILY4 (k4) or FAMILY6 (k6); 0: not counted
	__u32 open;   // 1 from counted opened until counted closed
	struct flow_key k4;
	struct flow_key6 k6;
	// A TCP socket counted from TCP's own counts (socktcp.c): how much
	// of them its pair has been given, while open.
	__u64 sent;     // payload sent, first transmissions only
	__u64 received; // payload received in order
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sk_lb);
} sk_lb SEC(".maps");

#endif
