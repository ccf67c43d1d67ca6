// SPDX-License-Identifier: GPL-2.0
/* slabratetop: slab allocations per cache, from two tracepoints (prototypes since 6.1):
 *
 * - kmem:kmem_cache_alloc (call_site, ptr, struct kmem_cache *s, gfp_flags, node): every
 *   kmem_cache_alloc*() of a named cache. Keyed by the cache's address; bytes are s->size,
 *   what the cache really hands out per object (the tracepoint's bytes_alloc).
 * - kmem:kmalloc (call_site, ptr, bytes_req, bytes_alloc, gfp_flags, node): every kmalloc*().
 *   Since 6.1 these no longer fire kmem_cache_alloc, and the tracepoint does not say which
 *   kmalloc cache served them, only its object size: keyed and labelled by that size class,
 *   "kmalloc-<size>" as the kernel names the caches (kmalloc-96, kmalloc-1k), which merges
 *   the -cg, -rcl, dma and random variants of one size. Sizes above KMALLOC_MAX_CACHE_SIZE
 *   come from the page allocator, not a slab, and are not counted.
 *
 * Counters live in the double buffer of maps.bpf.h (slabs_a, slabs_b, `active`).
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "maps.bpf.h"
#include "slabratetop.h"

/* SLUB's largest kmalloc cache: 2 pages (x86's 4 KiB pages). */
#define KMALLOC_MAX_CACHE_SIZE 8192

/* Set by the loader before load; 0 means "no filter". */
const volatile __u32 target_pid = 0;

/* Allocations the programs could not count because the active map was full. */
__u64 dropped_events = 0;

DOUBLE_BUFFERED_HASH(slabs, __u64, struct slab_value, SLAB_MAX_CACHES);

/* The active map, or NULL when this allocation is filtered out (or the slot is empty, which
 * is counted as a drop). */
static __always_inline void *active_slabs(void)
{
	__u32 zero = 0;
	void *slabs;

	if (target_pid && (bpf_get_current_pid_tgid() >> 32) != target_pid)
		return NULL;
	slabs = bpf_map_lookup_elem(&active, &zero);
	if (!slabs)
		__sync_fetch_and_add(&dropped_events, 1);
	return slabs;
}

static __always_inline void add(struct slab_value *value, __u64 bytes)
{
	if (!value) {
		__sync_fetch_and_add(&dropped_events, 1);
		return;
	}
	__sync_fetch_and_add(&value->count, 1);
	__sync_fetch_and_add(&value->bytes, bytes);
}

static __always_inline int count_cache(const void *ptr, struct kmem_cache *s)
{
	struct slab_value *value, fresh = {};
	__u64 key = (__u64)s;
	void *slabs;

	if (!ptr || !s)
		return 0; /* failed allocation: nothing handed out */
	slabs = active_slabs();
	if (!slabs)
		return 0;
	value = bpf_map_lookup_elem(slabs, &key);
	if (!value) { /* the name is read once per cache and interval, not per allocation */
		bpf_probe_read_kernel_str(fresh.name, sizeof(fresh.name), BPF_CORE_READ(s, name));
		value = lookup_or_try_init(slabs, &key, &fresh);
	}
	add(value, BPF_CORE_READ(s, size));
	return 0;
}

static __always_inline int count_kmalloc(const void *ptr, size_t bytes_alloc)
{
	struct slab_value *value, fresh = {};
	__u64 key = bytes_alloc; /* far below any kernel address: no clash with cache keys */
	void *slabs;

	if (!ptr || !bytes_alloc || bytes_alloc > KMALLOC_MAX_CACHE_SIZE)
		return 0;
	slabs = active_slabs();
	if (!slabs)
		return 0;
	value = bpf_map_lookup_elem(slabs, &key);
	if (!value) {
		if (bytes_alloc % 1024)
			BPF_SNPRINTF(fresh.name, sizeof(fresh.name), "kmalloc-%lu", bytes_alloc);
		else
			BPF_SNPRINTF(fresh.name, sizeof(fresh.name), "kmalloc-%luk", bytes_alloc / 1024);
		value = lookup_or_try_init(slabs, &key, &fresh);
	}
	add(value, bytes_alloc);
	return 0;
}

SEC("tp_btf/kmem_cache_alloc")
int BPF_PROG(alloc_btf, unsigned long call_site, const void *ptr, struct kmem_cache *s)
{
	return count_cache(ptr, s);
}

SEC("raw_tp/kmem_cache_alloc")
int BPF_PROG(alloc_raw, unsigned long call_site, const void *ptr, struct kmem_cache *s)
{
	return count_cache(ptr, s);
}

SEC("tp_btf/kmalloc")
int BPF_PROG(kmalloc_btf, unsigned long call_site, const void *ptr, size_t bytes_req,
	     size_t bytes_alloc)
{
	return count_kmalloc(ptr, bytes_alloc);
}

SEC("raw_tp/kmalloc")
int BPF_PROG(kmalloc_raw, unsigned long call_site, const void *ptr, size_t bytes_req,
	     size_t bytes_alloc)
{
	return count_kmalloc(ptr, bytes_alloc);
}

char LICENSE[] SEC("license") = "GPL";
