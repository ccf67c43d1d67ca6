// SPDX-License-Identifier: GPL-2.0
/* slabratetop: kmem cache allocations per cache, from the kmem:kmem_cache_alloc tracepoint
 * (prototype since 6.1: call_site, ptr, struct kmem_cache *s, gfp_flags, node). Bytes are
 * s->size, what the cache really hands out per object (the tracepoint's bytes_alloc).
 *
 * Same double-buffered layout as tcptop: `active` selects slabs_a or slabs_b, user space swaps
 * the slot (the kernel waits for running programs before the update returns) and drains the
 * other map.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "slabratetop.h"

/* Set by the loader before load; 0 means "no filter". */
const volatile __u32 target_pid = 0;

/* Allocations the programs could not count because the active map was full. */
__u64 dropped_events = 0;

struct slabs {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SLAB_MAX_CACHES);
	__type(key, __u64);
	__type(value, struct slab_value);
} slabs_a SEC(".maps"), slabs_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct slabs);
} active SEC(".maps") = {
	.values = { &slabs_a },
};

static __always_inline int count(const void *ptr, struct kmem_cache *s)
{
	struct slab_value *value, fresh = {};
	__u64 key = (__u64)s;
	__u32 zero = 0;
	void *slabs;

	if (!ptr || !s)
		return 0; /* failed allocation: nothing handed out */
	if (target_pid && (bpf_get_current_pid_tgid() >> 32) != target_pid)
		return 0;

	slabs = bpf_map_lookup_elem(&active, &zero);
	if (!slabs)
		goto drop;
	value = bpf_map_lookup_elem(slabs, &key);
	if (!value) {
		bpf_probe_read_kernel_str(fresh.name, sizeof(fresh.name), BPF_CORE_READ(s, name));
		bpf_map_update_elem(slabs, &key, &fresh, BPF_NOEXIST);
		value = bpf_map_lookup_elem(slabs, &key);
		if (!value)
			goto drop;
	}
	__sync_fetch_and_add(&value->count, 1);
	__sync_fetch_and_add(&value->bytes, BPF_CORE_READ(s, size));
	return 0;
drop:
	__sync_fetch_and_add(&dropped_events, 1);
	return 0;
}

SEC("tp_btf/kmem_cache_alloc")
int BPF_PROG(alloc_btf, unsigned long call_site, const void *ptr, struct kmem_cache *s)
{
	return count(ptr, s);
}

SEC("raw_tp/kmem_cache_alloc")
int BPF_PROG(alloc_raw, unsigned long call_site, const void *ptr, struct kmem_cache *s)
{
	return count(ptr, s);
}

char LICENSE[] SEC("license") = "GPL";
