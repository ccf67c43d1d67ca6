/* flowtable's record layout, shared by flowtable.bpf.c and Python (read back from the object's
 * BTF, never retyped). */
#ifndef BPFBATCH_FLOWTABLE_H
#define BPFBATCH_FLOWTABLE_H

#define FLOWTABLE_MAX_FLOWS 65536

/* An IPv4 5-tuple; addresses and ports in network order, as on the wire. */
struct flowtable_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* Counted by the tc program on every packet of the flow; times are bpf_ktime_get_ns(). */
struct flowtable_stats {
	__u64 packets;
	__u64 bytes;
	__u64 first_seen_ns;
	__u64 last_seen_ns;
};

#endif
