/* slabratetop's record layout, shared by slabratetop.bpf.c and Python (read back from the
 * object's BTF). */
#ifndef BPFBATCH_SLABRATETOP_H
#define BPFBATCH_SLABRATETOP_H

#define SLAB_NAME_LEN 32
#define SLAB_MAX_CACHES 4096

/* Allocations from one cache, keyed by the struct kmem_cache's address (cheaper than hashing
 * its name on every allocation; Python merges caches that share a name). */
struct slab_value {
	char name[SLAB_NAME_LEN];
	__u64 count;
	__u64 bytes;
};

#endif
