// SPDX-License-Identifier: GPL-2.0
/* map exec: bpfbatch's own filter (bpfbatch_filter.h), one generic, pre-built program that
 * evaluates a predicate given as a parameter table (map_exec.h) on every element of any hash
 * or array map; the walk (bpf_for_each_map_elem), the action (count, copy out or delete in the
 * same visit, after a re-check: --mode kernel-fast; the default kernel delete only has it copy
 * out, and deletes with LOOKUP_AND_DELETE from user space), the out map and the resume protocol
 * are the header's, shared with user-written filters.
 *
 * It is a BPF_PROG_TYPE_SYSCALL program, run once per pass with BPF_PROG_TEST_RUN; its context
 * is struct map_exec_args (parameters in, counters out). Syscall programs are sleepable; the
 * helper is allowed there (it takes rcu_read_lock per bucket itself), the run keeps migration
 * disabled, and unlike a map iterator's read() it has no 1M-element budget: one run walks the
 * whole map unless the out map fills or max_selected is reached.
 * Per-CPU maps: the walk sees the current CPU's value only, so every field is read on every
 * possible CPU (bpf_map_lookup_percpu_elem) and the largest value is compared: for a timestamp
 * that is the newest one.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bpfbatch_filter.h"

/* How many terms the runner loads the program for (set before load): the verifier then walks
 * only those, so loading for a 1-term prune costs a twentieth of loading for 16 terms. */
const volatile __u32 term_slots = MAP_EXEC_MAX_TERMS;

/* Per term: 0 evaluate, 1 always false, 2 always true (an unsigned field against a
 * now-relative operand that fell below zero). */
__u8 fixed[MAP_EXEC_MAX_TERMS];

/* The integer of the term's width at its offset of `p`, an object of `size` bytes. */
static __always_inline bool read_field(const void *p, __u32 size, const struct map_exec_term *t,
				       __u64 *out)
{
	__u32 off = t->offset;

	switch (t->width) {
	case 1:
		if (size < 1 || off > size - 1)
			return false;
		*out = t->is_signed ? (__u64)(__s64)*(__s8 *)(p + off) : *(__u8 *)(p + off);
		return true;
	case 2:
		if (size < 2 || off > size - 2)
			return false;
		*out = t->is_signed ? (__u64)(__s64)*(__s16 *)(p + off) : *(__u16 *)(p + off);
		return true;
	case 4:
		if (size < 4 || off > size - 4)
			return false;
		*out = t->is_signed ? (__u64)(__s64)*(__s32 *)(p + off) : *(__u32 *)(p + off);
		return true;
	case 8:
		if (size < 8 || off > size - 8)
			return false;
		*out = *(__u64 *)(p + off);
		return true;
	}
	return false;
}

static __always_inline bool less(__u64 a, __u64 b, bool is_signed)
{
	return is_signed ? (__s64)a < (__s64)b : a < b;
}

/* The field's value: the key's, this value's, or the largest across CPUs for a per-CPU map. */
static __always_inline bool field_value(const void *key, const void *value,
					const struct map_exec_term *t, __u64 *x)
{
	bool found = false;
	__u64 v;

	if (t->in_key)
		return read_field(key, key_size, t, x);
	if (!nr_cpus)
		return read_field(value, value_size, t, x);
	for (__u32 cpu = 0; cpu < MAP_EXEC_MAX_CPUS && cpu < nr_cpus; cpu++) {
		const void *slot = bpf_map_lookup_percpu_elem(&target, key, cpu);

		if (!slot || !read_field(slot, value_size, t, &v))
			continue;
		if (!found || less(*x, v, t->is_signed))
			*x = v;
		found = true;
	}
	return found;
}

static __always_inline bool term_holds(const void *key, const void *value, __u32 i)
{
	const struct map_exec_term *t = &bpfbatch_run.terms[i];
	__u64 x, y = t->operand;

	if (fixed[i])
		return fixed[i] == 2;
	if (!field_value(key, value, t, &x))
		return false;
	switch (t->op) {
	case MAP_EXEC_EQ: return x == y;
	case MAP_EXEC_NE: return x != y;
	case MAP_EXEC_LT: return less(x, y, t->is_signed);
	case MAP_EXEC_LE: return !less(y, x, t->is_signed);
	case MAP_EXEC_GT: return less(y, x, t->is_signed);
	case MAP_EXEC_GE: return !less(x, y, t->is_signed);
	}
	return false;
}

/* Disjunctive normal form: true when every term of some clause holds. */
static __always_inline bool matches(const void *key, const void *value)
{
	bool clause = true;

	if (!bpfbatch_run.nterms)
		return true;
	for (__u32 i = 0; i < MAP_EXEC_MAX_TERMS && i < term_slots && i < bpfbatch_run.nterms; i++) {
		if (clause && !term_holds(key, value, i))
			clause = false;
		if (bpfbatch_run.terms[i].clause_end) {
			if (clause)
				return true;
			clause = true;
		}
	}
	return false;
}

/* The predicate as a filter (bpfbatch_filter.h): the walk, action and output are shared. */
static long bpfbatch_filter(const void *key, void *value)
{
	return matches(key, value) ? BPFBATCH_SELECT : BPFBATCH_KEEP;
}

SEC("syscall")
int map_exec(struct map_exec_args *args)
{
	bpfbatch_begin(args);
	/* Resolve the now-relative operands once per run. */
	for (__u32 i = 0; i < MAP_EXEC_MAX_TERMS && i < term_slots; i++) {
		struct map_exec_term *t = &bpfbatch_run.terms[i];
		__s64 operand;

		fixed[i] = 0;
		if (!t->relative)
			continue;
		operand = (__s64)bpfbatch_run.now + t->operand;
		t->operand = operand;
		if (operand < 0 && !t->is_signed)	/* no unsigned value is below it */
			fixed[i] = (t->op == MAP_EXEC_NE || t->op == MAP_EXEC_GT ||
				    t->op == MAP_EXEC_GE) ? 2 : 1;
	}
	return bpfbatch_walk(args);
}

char LICENSE[] SEC("license") = "GPL";
