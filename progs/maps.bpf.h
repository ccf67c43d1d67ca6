/* Map helpers shared by the package's counting programs (BPF side only). */
#ifndef BPFBATCH_MAPS_BPF_H
#define BPFBATCH_MAPS_BPF_H

/* The value of `key` in hash `map`, inserted as a copy of `*init` when absent. Another CPU may
 * insert the same key first: then our BPF_NOEXIST update fails and the second lookup finds
 * theirs. NULL only when the map is full. */
static __always_inline void *lookup_or_try_init(void *map, const void *key, const void *init)
{
	void *value = bpf_map_lookup_elem(map, key);

	if (value)
		return value;
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

/* The double buffer bpfbatch/top/intervals.py reads out: two identical hash maps,
 * <name>_a and <name>_b, and the one-slot array-of-maps `active` holding the one the
 * programs write (<name>_a at load). Programs fetch slot 0 at every event; user space
 * points the slot at the other map (the update returns after an RCU grace period, so no
 * program still holds the old one) and drains the old one. */
#define DOUBLE_BUFFERED_HASH(name, key_type, value_type, entries)		\
	struct name {								\
		__uint(type, BPF_MAP_TYPE_HASH);				\
		__uint(max_entries, entries);					\
		__type(key, key_type);						\
		__type(value, value_type);					\
	} name##_a SEC(".maps"), name##_b SEC(".maps");				\
	struct {								\
		__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);			\
		__uint(max_entries, 1);						\
		__type(key, __u32);						\
		__array(values, struct name);					\
	} active SEC(".maps") = {						\
		.values = { &name##_a },					\
	}

#endif
