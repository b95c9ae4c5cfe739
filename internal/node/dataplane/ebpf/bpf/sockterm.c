// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Socket termination: BPF iterators over the TCP and UDP sockets of one
// network namespace (the one of the task that opens the iterator) that
// destroy, with the bpf_sock_destroy() kfunc (Linux 6.5), each socket
// the socket programs translated to a pair (service, backend) that the
// agent has put in `ended`, as long as the socket is still connected to
// that backend. The socket's owner gets ECONNABORTED and connects again,
// through the VIP, to a backend the service still has.
//
// The iterators hold each socket's lock while the program runs, which
// is what the kfunc needs (it is allowed in iterators only). The sk_lb
// map is the socket programs' own, given at load in place of this
// object's: a socket without storage there was never translated (it
// connected to the backend's address itself, or belongs to another
// cgroup) and is never touched.
//
// Only UAPI and libbpf headers, as for socklb.c: the few kernel fields
// read are declared here with preserve_access_index, and the loader
// relocates them against the running kernel's BTF (CO-RE).

#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>

#include "socklb.h"

#define AF_INET 2
#define AF_INET6 10
#define TCP_ESTABLISHED 1 // a connected UDP socket's state too

// The fields of the kernel's struct sock_common that say where a socket
// is connected; the loader finds them by name, inside its unions.
struct sock_common {
	__u32 skc_daddr;         // network order
	__u16 skc_dport;         // network order
	unsigned short skc_family;
	unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct bpf_iter_meta;
struct udp_sock;

// The iterators' contexts, as the kernel declares them.
struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

// The pairs whose sockets are to go, filled by the agent before it runs
// the iterators and emptied after.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key);
	__type(value, __u8);
} ended SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct flow_key6);
	__type(value, __u8);
} ended6 SEC(".maps");

// Sockets destroyed, and those whose destruction failed, since load.
__u64 destroyed;
__u64 failed;

static __always_inline int same6(struct in6_addr *a, __u32 *b)
{
	return a->in6_u.u6_addr32[0] == b[0] && a->in6_u.u6_addr32[1] == b[1] &&
	       a->in6_u.u6_addr32[2] == b[2] && a->in6_u.u6_addr32[3] == b[3];
}

// terminate destroys the socket skc (sk its full socket) if its pair has
// ended and it is still connected to the pair's backend.
static __always_inline void terminate(struct sock_common *skc, void *sk)
{
	struct sk_lb *s = bpf_sk_storage_get(&sk_lb, sk, 0, 0);
	if (!s || skc->skc_state != TCP_ESTABLISHED)
		return;
	if (s->family == FAMILY4) {
		if (skc->skc_family != AF_INET || skc->skc_daddr != s->k4.be.addr || skc->skc_dport != s->k4.be.port)
			return;
		if (!bpf_map_lookup_elem(&ended, &s->k4))
			return;
	} else if (s->family == FAMILY6) {
		if (skc->skc_family != AF_INET6 || !same6(&skc->skc_v6_daddr, s->k6.be.addr) || skc->skc_dport != s->k6.be.port)
			return;
		if (!bpf_map_lookup_elem(&ended6, &s->k6))
			return;
	} else {
		return;
	}
	if (bpf_sock_destroy(skc))
		__sync_fetch_and_add(&failed, 1);
	else
		__sync_fetch_and_add(&destroyed, 1);
}

SEC("iter/tcp")
int term_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	if (!skc)
		return 0;
	// Request and time-wait sockets have no storage.
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(skc);
	if (tp)
		terminate(skc, tp);
	return 0;
}

SEC("iter/udp")
int term_udp(struct bpf_iter__udp *ctx)
{
	struct udp_sock *up = ctx->udp_sk;
	if (up)
		terminate((struct sock_common *)up, up);
	return 0;
}

char _license[] SEC("license") = "Dual BSD/GPL";
