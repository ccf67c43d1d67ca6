/* flowtable's record layout, version 2: the flow table of flowtable_v2.bpf.c, which
 * `bpfbatch migrate` fills from a version 1 table (flowtable.h) without losing a flow:
 * proto widened to 32 bits (its padding gone), first_seen_ns renamed first_ns, two fields
 * added. Read back in Python through BTF, never retyped. */
#ifndef BPFBATCH_FLOWTABLE_V2_H
#define BPFBATCH_FLOWTABLE_V2_H

#define FLOWTABLE_V2_MAX_FLOWS 65536

/* An IPv4 5-tuple; addresses and ports in network order, as on the wire. */
struct flowtable_key_v2 {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u32 proto;
};

/* Counted by the tc program on every packet of the flow; times are bpf_ktime_get_ns(). */
struct flowtable_stats_v2 {
	__u64 packets;
	__u64 bytes;
	__u64 first_ns;
	__u64 last_seen_ns;
	__u32 ifindex;   /* where the flow was first seen */
	__u32 max_len;   /* the largest packet */
};

#endif
