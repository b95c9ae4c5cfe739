// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Socket-level load balancing for IPv4 and IPv6: a connection that starts on a
// local socket has its VIP:port rewritten to a backend once, at connect()
// (TCP and connected UDP) or at each sendmsg() (unconnected UDP); replies
// and getpeername() show the VIP again. No packet of such a connection
// ever carries the VIP, so no NAT or conntrack entry is made for it.
//
// Only UAPI headers (linux-libc-dev) and libbpf's helper headers are
// included, not a vmlinux.h dumped from the running kernel, so that the
// object is the same on every machine with Debian's toolchain.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "socklb.h"  // the service and backend keys, the socket storage
#include "traffic.h" // the translated connections' counts

#define ECONNREFUSED 111

// SLOTS is the length of every service's Maglev lookup table; it is the
// nftables data plane's, so both pick alike. Go checks the two agree.
#define SLOTS 61

// Service flags.
#define SVC_REFUSE 1 // no usable backend: connect() and sendmsg() fail

// Algorithms: what a slot is picked by.
#define ALG_RANDOM 0    // ROUND_ROBIN: a random slot per connection
#define ALG_NETNS 1     // SOURCE_IP: the client's network namespace (its address)
#define ALG_SOCKET 2    // SOURCE_IP_PORT: the socket (its address and port)

struct svc_val {
	__u32 flags;
	__u32 alg;
	__u64 persist; // SOURCE_IP persistence: its timeout in ns, 0 for none
	struct backend slots[SLOTS];
};

// The whole service is one value, so an update replaces its table at
// once: a connection never sees half of an old and half of a new one.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key);
	__type(value, struct svc_val);
} services SEC(".maps");

// What connect() did per service, per CPU, since the service came: the
// agent reads the sums and reports what grew (no read-and-reset race).
struct counters {
	__u64 connections; // translated connect()s
	__u64 refused;     // connect()s and sendmsg()s refused
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key);
	__type(value, struct counters);
} counters SEC(".maps");

// count adds one to a service's connections or refusals.
static __always_inline void count(void *map, void *key, int refused)
{
	struct counters *c = bpf_map_lookup_elem(map, key);
	if (!c) {
		struct counters zero = {};
		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(map, key);
		if (!c)
			return;
	}
	if (refused)
		c->refused++;
	else
		c->connections++;
}

// Reverse translation, per socket and backend: what the socket asked for.
struct rev_key {
	__u64 cookie;
	__u32 addr;
	__u16 port;
	__u16 pad;
};

struct rev_val {
	__u32 vip;
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key);
	__type(value, struct rev_val);
} revnat SEC(".maps");

// SOURCE_IP persistence: the backend a client last connected to, per
// service. The client is its network namespace, the identity SOURCE_IP
// hashes (no source address exists yet at connect()).
struct aff_key {
	struct svc_key svc;
	__u64 client; // network namespace cookie
};

struct aff_val {
	struct backend backend;
	__u64 used; // bpf_ktime_get_ns() of the last connect() or sendmsg()
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aff_key);
	__type(value, struct aff_val);
} affinity SEC(".maps");

// has tells whether b still holds a slot of v: an affinity to a backend
// that has left the service (or lost all its slots) is ignored.
static __always_inline int has(struct svc_val *v, struct backend b)
{
	for (int j = 0; j < SLOTS; j++)
		if (v->slots[j].addr == b.addr && v->slots[j].port == b.port)
			return 1;
	return 0;
}

// persist returns the backend the client used within the service's
// timeout if the service still has it, and otherwise picked, which it
// remembers; either way the timeout starts again.
static __always_inline struct backend persist(struct bpf_sock_addr *ctx, struct svc_key *k, struct svc_val *v, struct backend picked)
{
	struct aff_key ak = { .svc = *k, .client = bpf_get_netns_cookie(ctx) };
	__u64 now = bpf_ktime_get_ns();
	struct aff_val *a = bpf_map_lookup_elem(&affinity, &ak);
	if (a) {
		struct backend last = a->backend;
		if (now < a->used + v->persist && has(v, last)) {
			a->used = now;
			return last;
		}
	}
	struct aff_val nv = { .backend = picked, .used = now };
	bpf_map_update_elem(&affinity, &ak, &nv, BPF_ANY);
	return picked;
}

// Defined with the counting programs, at the end: connect() remembers
// where a translated socket was sent, a connect() elsewhere forgets it.
static __always_inline void remember(struct bpf_sock_addr *ctx, struct svc_key *k, struct backend *b);
static __always_inline void forget(struct bpf_sock_addr *ctx);

static __always_inline __u32 mix(__u64 x)
{
	return (__u32)((x * 0x9E3779B97F4A7C15ULL) >> 32);
}

// pick chooses a slot by the service's algorithm.
static __always_inline __u32 pick(struct bpf_sock_addr *ctx, __u32 alg, int per_socket)
{
	__u32 h;
	switch (alg) {
	case ALG_NETNS:
		h = mix(bpf_get_netns_cookie(ctx));
		break;
	case ALG_SOCKET:
		h = mix(bpf_get_socket_cookie(ctx));
		break;
	default:
		h = per_socket ? mix(bpf_get_socket_cookie(ctx)) : bpf_get_prandom_u32();
	}
	return h % SLOTS;
}

// xlate rewrites the destination of ctx if it is a service: 1 lets the
// call go on, 0 fails it. Datagrams of an unconnected socket (sendmsg)
// stay with one backend per socket, as a conntrack flow would keep them.
static __always_inline int xlate(struct bpf_sock_addr *ctx, int per_socket)
{
	struct svc_key k = {
		.vip = ctx->user_ip4,
		.port = (__u16)ctx->user_port,
		.proto = (__u8)ctx->protocol,
	};
	struct svc_val *v = bpf_map_lookup_elem(&services, &k);
	if (!v) {
		if (!per_socket)
			forget(ctx);
		return 1;
	}
	if (v->flags & SVC_REFUSE) {
		count(&counters, &k, 1);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	// A datagram of an unconnected socket is not a connection.
	if (!per_socket)
		count(&counters, &k, 0);
	__u32 i = pick(ctx, v->alg, per_socket);
	// The verifier does not follow the modulo: bound i where it sees it
	// (the barrier keeps clang from dropping a check it knows is true).
	asm volatile("" : "+r"(i));
	if (i >= SLOTS)
		return 1;
	struct backend b = v->slots[i];
	if (v->persist)
		b = persist(ctx, &k, v, b);
	struct rev_key rk = {
		.cookie = bpf_get_socket_cookie(ctx),
		.addr = b.addr,
		.port = b.port,
	};
	struct rev_val rv = { .vip = k.vip, .port = k.port };
	bpf_map_update_elem(&revnat, &rk, &rv, BPF_ANY);
	if (!per_socket)
		remember(ctx, &k, &b);
	ctx->user_ip4 = b.addr;
	ctx->user_port = b.port;
	return 1;
}

// unxlate shows the VIP where the peer is a backend this socket was sent to.
static __always_inline void unxlate(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = {
		.cookie = bpf_get_socket_cookie(ctx),
		.addr = ctx->user_ip4,
		.port = (__u16)ctx->user_port,
	};
	struct rev_val *rv = bpf_map_lookup_elem(&revnat, &rk);
	if (!rv)
		return;
	ctx->user_ip4 = rv->vip;
	ctx->user_port = rv->port;
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx)
{
	return xlate(ctx, 0);
}

SEC("cgroup/sendmsg4")
int sendmsg4(struct bpf_sock_addr *ctx)
{
	return xlate(ctx, 1);
}

SEC("cgroup/recvmsg4")
int recvmsg4(struct bpf_sock_addr *ctx)
{
	unxlate(ctx);
	return 1;
}

SEC("cgroup/getpeername4")
int getpeername4(struct bpf_sock_addr *ctx)
{
	unxlate(ctx);
	return 1;
}

// IPv6: the same, with 16-byte addresses (IPv4-mapped addresses of
// dual-stack sockets are not looked up; the keys are in socklb.h).
struct svc_val6 {
	__u32 flags;
	__u32 alg;
	__u64 persist;
	struct backend6 slots[SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key6);
	__type(value, struct svc_val6);
} services6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key6);
	__type(value, struct counters);
} counters6 SEC(".maps");

struct rev_key6 {
	__u64 cookie;
	__u32 addr[4];
	__u16 port;
	__u16 pad;
	__u32 pad2;
};

struct rev_val6 {
	__u32 vip[4];
	__u16 port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key6);
	__type(value, struct rev_val6);
} revnat6 SEC(".maps");

struct aff_key6 {
	struct svc_key6 svc;
	__u32 pad;
	__u64 client;
};

struct aff_val6 {
	struct backend6 backend;
	__u32 pad;
	__u64 used;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aff_key6);
	__type(value, struct aff_val6);
} affinity6 SEC(".maps");

static __always_inline int has6(struct svc_val6 *v, struct backend6 *b)
{
	for (int j = 0; j < SLOTS; j++) {
		struct backend6 *s = &v->slots[j];
		if (s->addr[0] == b->addr[0] && s->addr[1] == b->addr[1] && s->addr[2] == b->addr[2] &&
		    s->addr[3] == b->addr[3] && s->port == b->port)
			return 1;
	}
	return 0;
}

static __always_inline struct backend6 persist6(struct bpf_sock_addr *ctx, struct svc_key6 *k, struct svc_val6 *v, struct backend6 picked)
{
	struct aff_key6 ak = { .svc = *k, .client = bpf_get_netns_cookie(ctx) };
	__u64 now = bpf_ktime_get_ns();
	struct aff_val6 *a = bpf_map_lookup_elem(&affinity6, &ak);
	if (a) {
		struct backend6 last = a->backend;
		if (now < a->used + v->persist && has6(v, &last)) {
			a->used = now;
			return last;
		}
	}
	struct aff_val6 nv = { .backend = picked, .used = now };
	bpf_map_update_elem(&affinity6, &ak, &nv, BPF_ANY);
	return picked;
}

static __always_inline void remember6(struct bpf_sock_addr *ctx, struct svc_key6 *k, struct backend6 *b);

static __always_inline int xlate6(struct bpf_sock_addr *ctx, int per_socket)
{
	struct svc_key6 k = {
		.vip = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] },
		.port = (__u16)ctx->user_port,
		.proto = (__u8)ctx->protocol,
	};
	struct svc_val6 *v = bpf_map_lookup_elem(&services6, &k);
	if (!v) {
		if (!per_socket)
			forget(ctx);
		return 1;
	}
	if (v->flags & SVC_REFUSE) {
		count(&counters6, &k, 1);
		bpf_set_retval(-ECONNREFUSED);
		return 0;
	}
	if (!per_socket)
		count(&counters6, &k, 0);
	__u32 i = pick(ctx, v->alg, per_socket);
	asm volatile("" : "+r"(i));
	if (i >= SLOTS)
		return 1;
	struct backend6 b = v->slots[i];
	if (v->persist)
		b = persist6(ctx, &k, v, b);
	struct rev_key6 rk = {
		.cookie = bpf_get_socket_cookie(ctx),
		.addr = { b.addr[0], b.addr[1], b.addr[2], b.addr[3] },
		.port = b.port,
	};
	struct rev_val6 rv = { .port = k.port };
	__builtin_memcpy(rv.vip, k.vip, sizeof(rv.vip));
	bpf_map_update_elem(&revnat6, &rk, &rv, BPF_ANY);
	if (!per_socket)
		remember6(ctx, &k, &b);
	ctx->user_ip6[0] = b.addr[0];
	ctx->user_ip6[1] = b.addr[1];
	ctx->user_ip6[2] = b.addr[2];
	ctx->user_ip6[3] = b.addr[3];
	ctx->user_port = b.port;
	return 1;
}

static __always_inline void unxlate6(struct bpf_sock_addr *ctx)
{
	struct rev_key6 rk = {
		.cookie = bpf_get_socket_cookie(ctx),
		.addr = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] },
		.port = (__u16)ctx->user_port,
	};
	struct rev_val6 *rv = bpf_map_lookup_elem(&revnat6, &rk);
	if (!rv)
		return;
	ctx->user_ip6[0] = rv->vip[0];
	ctx->user_ip6[1] = rv->vip[1];
	ctx->user_ip6[2] = rv->vip[2];
	ctx->user_ip6[3] = rv->vip[3];
	ctx->user_port = rv->port;
}

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx)
{
	return xlate6(ctx, 0);
}

SEC("cgroup/sendmsg6")
int sendmsg6(struct bpf_sock_addr *ctx)
{
	return xlate6(ctx, 1);
}

SEC("cgroup/recvmsg6")
int recvmsg6(struct bpf_sock_addr *ctx)
{
	unxlate6(ctx);
	return 1;
}

SEC("cgroup/getpeername6")
int getpeername6(struct bpf_sock_addr *ctx)
{
	unxlate6(ctx);
	return 1;
}

// Traffic of the translated connections (traffic.h): connect()
// remembers a socket's pair; a UDP socket's connection and datagrams are
// counted here, a TCP socket's by socktcp.c.

// remember records the pair a socket was translated to. A UDP socket's
// connection is counted opened now; a TCP socket's when TCP starts it
// (socktcp.c), so that a connect() that fails before is none.
static __always_inline void remember(struct bpf_sock_addr *ctx, struct svc_key *k, struct backend *b)
{
	struct sk_lb *s = bpf_sk_storage_get(&sk_lb, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return;
	// A socket connected again (UDP, or TCP after a failed connect())
	// leaves the connection it had.
	closed(s);
	s->k4.svc = *k;
	s->k4.be = *b;
	s->family = FAMILY4;
	if (ctx->protocol != IPPROTO_TCP)
		opened(s);
}

static __always_inline void remember6(struct bpf_sock_addr *ctx, struct svc_key6 *k, struct backend6 *b)
{
	struct sk_lb *s = bpf_sk_storage_get(&sk_lb, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return;
	closed(s);
	s->k6.svc = *k;
	s->k6.be = *b;
	s->family = FAMILY6;
	if (ctx->protocol != IPPROTO_TCP)
		opened(s);
}

static __always_inline void forget(struct bpf_sock_addr *ctx)
{
	struct sk_lb *s = bpf_sk_storage_get(&sk_lb, ctx->sk, 0, 0);
	if (s) {
		closed(s);
		s->family = 0;
	}
}

// IP and UDP headers, when the IP header has no options or extensions.
#define IPV4_UDP_HEADERS 28
#define IPV6_UDP_HEADERS 48

// count_datagram adds a datagram of a translated UDP socket to its pair,
// in payload bytes: the packet's length less its IP (IPv4: as its header
// says; IPv6: 40 bytes, an extension header counts as payload) and UDP
// headers. One sent by the socket goes from the client, one it receives
// to it. A TCP socket's packets return at once (socktcp.c counts them).
static __always_inline void count_datagram(struct __sk_buff *skb, int from_client)
{
	struct bpf_sock *sk = skb->sk;
	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk || sk->protocol != IPPROTO_UDP)
		return;
	struct sk_lb *s = bpf_sk_storage_get(&sk_lb, sk, 0, 0);
	if (!s)
		return;
	struct traffic *t = traffic_of(s);
	if (!t)
		return;
	__u32 headers = IPV6_UDP_HEADERS;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 vihl;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1))
			return;
		headers = (vihl & 0xf) * 4 + 8;
	}
	if (skb->len < headers)
		return;
	if (from_client)
		__sync_fetch_and_add(&t->bytes_in, skb->len - headers);
	else
		__sync_fetch_and_add(&t->bytes_out, skb->len - headers);
}

// The datagram counting programs always let the packet through.
SEC("cgroup_skb/egress")
int count_egress(struct __sk_buff *skb)
{
	count_datagram(skb, 1);
	return 1;
}

SEC("cgroup_skb/ingress")
int count_ingress(struct __sk_buff *skb)
{
	count_datagram(skb, 0);
	return 1;
}

// A UDP socket released counts its connection closed (a TCP socket's
// connection ends when TCP closes it, socktcp.c). Attached with the
// datagram counting programs.
SEC("cgroup/sock_release")
int sock_release(struct bpf_sock *ctx)
{
	if (ctx->protocol != IPPROTO_UDP)
		return 1;
	struct sk_lb *s = bpf_sk_storage_get(&sk_lb, ctx, 0, 0);
	if (s)
		closed(s);
	return 1;
}

char _license[] SEC("license") = "Dual BSD/GPL";
