// SPDX-License-Identifier: GPL-2.0
/* tcptop: TCP bytes per process and flow, counted from the return values of
 * sock_sendmsg/sock_recvmsg (tracepoints sock:sock_send_length / sock:sock_recv_length).
 *
 * Counters live in the double buffer of maps.bpf.h (flows_a, flows_b, `active`).
 *
 * Each tracepoint has a tp_btf and a raw_tp program with the same body; the loader keeps the
 * one the kernel supports.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "tcptop.h"

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2
#define MSG_ERRQUEUE 0x2000

/* Set by the loader before load; 0 means "no filter". */
const volatile __u32 target_pid = 0;
const volatile __u16 target_family = 0;

/* Events the programs could not count because the active map was full. */
__u64 dropped_events = 0;
__u64 dropped_bytes = 0;

DOUBLE_BUFFERED_HASH(flows, struct tcptop_key, struct tcptop_value, TCPTOP_MAX_FLOWS);

static __always_inline int count(struct sock *sk, int ret, int flags, bool sent)
{
	struct tcptop_value *value, zero_value = {};
	struct tcptop_key key;
	__u32 zero = 0, pid;
	__u16 family;
	void *flows;

	/* Errors are negative; peeked data is read again later; an error-queue read returns
	 * notifications or looped-back headers, not bytes of the stream. */
	if (ret <= 0 || (flags & (MSG_PEEK | MSG_ERRQUEUE)))
		return 0;
	if (BPF_CORE_READ_BITFIELD_PROBED(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (target_family && family != target_family)
		return 0;
	pid = bpf_get_current_pid_tgid() >> 32;
	if (target_pid && pid != target_pid)
		return 0;

	__builtin_memset(&key, 0, sizeof(key));
	key.pid = pid;
	key.family = family;
	key.lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	key.dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == AF_INET) {
		BPF_CORE_READ_INTO((__u32 *)key.saddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)key.daddr, sk, __sk_common.skc_daddr);
	} else if (bpf_core_field_exists(sk->__sk_common.skc_v6_rcv_saddr)) {
		/* Absent without CONFIG_IPV6: the guard makes the load drop this branch instead of
		 * failing on a relocation the kernel cannot satisfy. */
		BPF_CORE_READ_INTO(&key.saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&key.daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	}
	bpf_get_current_comm(&key.comm, sizeof(key.comm));

	flows = bpf_map_lookup_elem(&active, &zero);
	if (!flows)
		goto drop;
	value = lookup_or_try_init(flows, &key, &zero_value);
	if (!value)
		goto drop;
	if (sent)
		__sync_fetch_and_add(&value->sent, ret);
	else
		__sync_fetch_and_add(&value->received, ret);
	return 0;
drop:
	__sync_fetch_and_add(&dropped_events, 1);
	__sync_fetch_and_add(&dropped_bytes, ret);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(send_btf, struct sock *sk, int ret, int flags)
{
	return count(sk, ret, flags, true);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(recv_btf, struct sock *sk, int ret, int flags)
{
	return count(sk, ret, flags, false);
}

SEC("raw_tp/sock_send_length")
int BPF_PROG(send_raw, struct sock *sk, int ret, int flags)
{
	return count(sk, ret, flags, true);
}

SEC("raw_tp/sock_recv_length")
int BPF_PROG(recv_raw, struct sock *sk, int ret, int flags)
{
	return count(sk, ret, flags, false);
}

char LICENSE[] SEC("license") = "GPL";
