// SPDX-License-Identifier: GPL-2.0
/* flowtable_v2: flowtable.bpf.c's next version, whose flow table has a new layout
 * (flowtable_v2.h). Its map keeps the name `flows`: an upgrade loads this object with that map
 * reused from the pin `bpfbatch migrate --swap-pin` renamed over the old table's.
 */
#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "maps.bpf.h"
#include "flowtable_v2.h"

/* The v2 table: LRU, as v1's. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flowtable_key_v2);
	__type(value, struct flowtable_stats_v2);
	__uint(max_entries, FLOWTABLE_V2_MAX_FLOWS);
} flows SEC(".maps");

#define ETH_P_IP 0x0800
#define ETH_HLEN 14
#define TC_ACT_OK 0

/* The headers are copied out with bpf_skb_load_bytes (v1 reads them in place). */
SEC("tc")
int record_flow(struct __sk_buff *skb)
{
	struct flowtable_stats_v2 *stats, fresh = { .first_ns = bpf_ktime_get_ns(),
						    .ifindex = skb->ifindex };
	struct flowtable_key_v2 key = {};
	struct iphdr ip;
	__u16 ports[2];

	if (skb->protocol != bpf_htons(ETH_P_IP) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)) ||
	    (ip.protocol != IPPROTO_TCP && ip.protocol != IPPROTO_UDP) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + ip.ihl * 4, ports, sizeof(ports)))
		return TC_ACT_OK;
	key.saddr = ip.saddr;
	key.daddr = ip.daddr;
	key.sport = ports[0];
	key.dport = ports[1];
	key.proto = ip.protocol;
	stats = lookup_or_try_init(&flows, &key, &fresh);
	if (!stats)
		return TC_ACT_OK;
	__sync_fetch_and_add(&stats->packets, 1);
	__sync_fetch_and_add(&stats->bytes, skb->len);
	if (skb->len > stats->max_len)
		stats->max_len = skb->len;
	stats->last_seen_ns = fresh.first_ns;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
