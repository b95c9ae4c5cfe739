// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// TCP traffic of the translated connections counted from TCP's own
// per-socket counts (those of tcp_info): payload sent, first
// transmissions only (bytes_sent less bytes_retrans), and payload
// received in order (bytes_received, less the one sequence number of
// the peer's FIN). No program runs per packet: a sock_ops program counts
// a translated socket's connection opened when TCP starts it, and gives
// its pair what the socket carried, and counts it closed, when TCP
// closes it (after close(), once its last data and FIN are through); an
// iterator over the sockets' sk_lb storage, which the agent runs before
// each read, gives the pairs of open connections what they carried
// since. A socket's sk_lb storage (socklb.h) holds what it has given, so
// each byte is counted once, whichever gives it.
//
// A separate object from socklb.c, as the kernel may refuse it (no BTF,
// no iterators) where the socket programs still balance; it is loaded
// with socklb's maps in place of its own. Only UAPI and libbpf headers:
// the few kernel fields read are declared here with
// preserve_access_index, and the loader relocates them against the
// running kernel's BTF (CO-RE).

#include <linux/bpf.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "traffic.h"

#define TCP_CLOSE 7
#define SOCK_DONE 1 // enum sock_flags: the peer's FIN was received

struct bpf_iter_meta;

// A socket's flags are its sock_common's (on newer kernels, this one's),
// or its sock's own.
struct sock_common {
	unsigned long skc_flags;
} __attribute__((preserve_access_index));

struct sock___own_flags {
	unsigned long sk_flags;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u64 bytes_received;
	__u64 bytes_sent;
	__u64 bytes_retrans;
} __attribute__((preserve_access_index));

struct bpf_map;
struct sock;

struct bpf_iter__bpf_sk_storage_map {
	struct bpf_iter_meta *meta;
	struct bpf_map *map;
	struct sock *sk;
	void *value;
} __attribute__((preserve_access_index));

static __always_inline __u64 sent(struct tcp_sock *tp)
{
	return tp->bytes_sent - tp->bytes_retrans;
}

static __always_inline __u64 received(struct tcp_sock *tp)
{
	__u64 n = tp->bytes_received;
	// The peer's FIN takes a sequence number, which bytes_received counts.
	unsigned long flags;
	if (bpf_core_field_exists(((struct sock_common *)tp)->skc_flags))
		flags = ((struct sock_common *)tp)->skc_flags;
	else
		flags = ((struct sock___own_flags *)tp)->sk_flags;
	if (flags & (1UL << SOCK_DONE) && n > 0)
		n--;
	return n;
}

// advance moves a socket's cursor (what it has given) from where it is
// to now and adds the difference to *counted: 0 if it could not (another
// gave at the same time). The iterator gives without the socket's lock,
// sock_ops with it: the compare-and-swap keeps each byte counted once.
static __always_inline int advance(__u64 *cursor, __u64 now, __u64 *counted)
{
	__u64 was = *cursor;
	if (now <= was)
		return 1;
	if (__sync_val_compare_and_swap(cursor, was, now) != was)
		return 0;
	__sync_fetch_and_add(counted, now - was);
	return 1;
}

// give adds to the socket's pair t what the socket carried since it
// last gave; tries is how often it tries again after losing a race.
static __always_inline void give(struct traffic *t, struct sk_lb *s, struct tcp_sock *tp, int tries)
{
	for (int i = 0; i <= tries; i++)
		if (advance(&s->sent, sent(tp), &t->bytes_in))
			break;
	for (int i = 0; i <= tries; i++)
		if (advance(&s->received, received(tp), &t->bytes_out))
			break;
}

SEC("sockops")
int count_tcp(struct bpf_sock_ops *ops)
{
	struct bpf_sock *sk = ops->sk;
	if (!sk)
		return 1;
	switch (ops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB: {
		// connect() has just translated the socket (or not): count from
		// what it carried before, if anything.
		struct sk_lb *s = bpf_sk_storage_get(&sk_lb, sk, 0, 0);
		if (!s || !s->family)
			return 1;
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (!tp)
			return 1;
		s->sent = sent(tp);
		s->received = received(tp);
		opened(s);
		if (s->open)
			bpf_sock_ops_cb_flags_set(ops, ops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
		return 1;
	}
	case BPF_SOCK_OPS_STATE_CB: {
		if (ops->args[1] != TCP_CLOSE)
			return 1;
		struct sk_lb *s = bpf_sk_storage_get(&sk_lb, sk, 0, 0);
		if (!s || !s->open)
			return 1;
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		struct traffic *t = traffic_of(s);
		if (tp && t) {
			// The last give: it wins any race with the iterator, which
			// gives at most once per socket per walk.
			give(t, s, tp, 2);
			__sync_fetch_and_add(&t->closed, 1);
		}
		s->open = 0;
		return 1;
	}
	}
	return 1;
}

// The iterator walks the sk_lb storage of every socket that has one,
// whatever its network namespace (an iterator over a namespace's TCP
// sockets would need the agent in each namespace, which takes
// CAP_SYS_ADMIN). It holds no socket's lock: a socket that TCP closes
// meanwhile gives its last bytes itself, and advance keeps the two from
// giving the same bytes.
SEC("iter/bpf_sk_storage_map")
int report_tcp(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sock *sk = ctx->sk;
	struct sk_lb *s = ctx->value;
	if (!sk || !s || !s->open)
		return 0;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	struct traffic *t = traffic_of(s);
	if (t)
		give(t, s, tp, 0);
	return 0;
}

char _license[] SEC("license") = "Dual BSD/GPL";
