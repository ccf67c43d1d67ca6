// SPDX-License-Identifier: GPL-2.0
/* flowtable: a tc classifier (direct action, never drops) that records every IPv4 TCP/UDP flow
 * it sees in an LRU hash: 5-tuple -> packets, bytes, first and last time seen.
 *
 * The LRU evicts when the table is full; `bpfbatch prune --field last_seen_ns` removes idle
 * flows before it comes to that. Counters are updated in place with atomic adds; last_seen_ns
 * is a plain store (the newest writer wins, which is what an idle test needs).
 */
#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include "maps.bpf.h"
#include "flowtable.h"

#define ETH_P_IP 0x0800
#define TC_ACT_OK 0

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FLOWTABLE_MAX_FLOWS);
	__type(key, struct flowtable_key);
	__type(value, struct flowtable_stats);
} flows SEC(".maps");

SEC("tc")
int record_flow(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct flowtable_stats *stats, fresh = {};
	struct flowtable_key key = {};
	__u64 now = bpf_ktime_get_ns();
	__u16 *ports;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return TC_ACT_OK;
	ports = (void *)ip + ip->ihl * 4;
	if ((void *)(ports + 2) > end)
		return TC_ACT_OK;
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.sport = ports[0];
	key.dport = ports[1];
	key.proto = ip->protocol;

	fresh.first_seen_ns = now;
	stats = lookup_or_try_init(&flows, &key, &fresh);
	if (!stats)
		return TC_ACT_OK;
	__sync_fetch_and_add(&stats->packets, 1);
	__sync_fetch_and_add(&stats->bytes, skb->len);
	stats->last_seen_ns = now;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
