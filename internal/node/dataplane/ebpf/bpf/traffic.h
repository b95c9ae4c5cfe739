// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Traffic of the translated connections, shared by the socket programs
// (socklb.c) and the TCP counting programs (socktcp.c, loaded with
// socklb's maps in place of its own). The packets of such a connection
// carry the backend's address and meet no per-service rule, so they are
// counted by socket: connect() remembers the service and backend in the
// socket's sk_lb storage (socklb.h) and the pair's entry here counts the
// connection opened (a UDP socket's at connect(), a TCP socket's when
// TCP starts it) and closed (a UDP socket's at its release or next
// connect(), a TCP socket's when TCP closes it). What a socket carried
// is counted in payload bytes, as Octavia's Amphora counts a stream's: a
// TCP socket's from TCP's own per-socket counts, with no program on the
// packet path (socktcp.c); a UDP socket's datagram by datagram, by
// cgroup_skb programs that the agent attaches, with sock_release, only
// while a UDP service is carried (socklb.c). Open connections are
// opened - closed. Like the counters, the values only grow: the agent
// reports what grew since its previous read, and deletes a pair once its
// backend has left the service and its sockets are all closed.

#ifndef TRAFFIC_H
#define TRAFFIC_H

#include "socklb.h"

struct traffic {
	__u64 bytes_in;  // from the client (to the load balancer, as Octavia counts)
	__u64 bytes_out; // to the client
	__u64 opened;    // sockets translated to the backend
	__u64 closed;    // of them, closed or connected elsewhere since
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key);
	__type(value, struct traffic);
} traffic SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key6);
	__type(value, struct traffic);
} traffic6 SEC(".maps");

// traffic_of finds the socket's pair (NULL if it is not counted).
static __always_inline struct traffic *traffic_of(struct sk_lb *s)
{
	if (s->family == FAMILY4)
		return bpf_map_lookup_elem(&traffic, &s->k4);
	if (s->family == FAMILY6)
		return bpf_map_lookup_elem(&traffic6, &s->k6);
	return 0;
}

// closed counts the socket's connection closed, once. Atomic adds on the
// per-CPU values: a softirq's count may interrupt another on its CPU.
static __always_inline void closed(struct sk_lb *s)
{
	if (!s->open)
		return;
	struct traffic *t = traffic_of(s);
	if (t)
		__sync_fetch_and_add(&t->closed, 1);
	s->open = 0;
}

// opened makes the socket's pair's entry if needed and counts a
// connection; the socket is counted open only if that worked, so that
// closed never counts a socket opened did not.
static __always_inline void opened(struct sk_lb *s)
{
	struct traffic *t = traffic_of(s);
	if (!t) {
		struct traffic zero = {};
		if (s->family == FAMILY4)
			bpf_map_update_elem(&traffic, &s->k4, &zero, BPF_NOEXIST);
		else if (s->family == FAMILY6)
			bpf_map_update_elem(&traffic6, &s->k6, &zero, BPF_NOEXIST);
		t = traffic_of(s);
		if (!t)
			return;
	}
	__sync_fetch_and_add(&t->opened, 1);
	s->open = 1;
}

#endif
