// SPDX-License-Identifier: GPL-2.0
/* map exec: one generic, pre-built program that walks any hash or array map with
 * bpf_for_each_map_elem, evaluates a predicate given as a parameter table (map_exec.h),
 * and counts, copies out or deletes what matches, in the same visit.
 *
 * It is a BPF_PROG_TYPE_SYSCALL program, run once per pass with BPF_PROG_TEST_RUN; its context
 * is struct map_exec_args (parameters in, counters out). Syscall programs are sleepable; the
 * helper is allowed there (it takes rcu_read_lock per bucket itself), the run keeps migration
 * disabled, and unlike a map iterator's read() it has no 1M-element budget: one run walks the
 * whole map unless the out map fills or max_selected is reached. Before load, user space:
 *   - points `target` at the user's map with bpf_map__reuse_fd (so one object is loaded per
 *     target map, and the verifier checks every access against that map's real sizes);
 *   - sizes `out` (one slot of rec_size bytes per record: the key rounded up to 8 bytes, then
 *     the value as the syscall ABI lays it out, i.e. every possible CPU's slot for per-CPU maps);
 *   - sets the .rodata constants below.
 * Per-CPU maps: the walk sees the current CPU's value only, so every field is read on every
 * possible CPU (bpf_map_lookup_percpu_elem) and the largest value is compared: for a timestamp
 * that is the newest one.
 *
 * Deletion re-checks first: the element is looked up again by key right before the delete and
 * the predicate re-evaluated when an update replaced it since the walk reached it, so only a
 * write landing between that lookup and the delete (nanoseconds) can be lost.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "map_exec.h"

const volatile __u32 key_size = 4;
const volatile __u32 key_stride = 8;	/* round_up(key_size, 8): where the value starts */
const volatile __u32 value_size = 8;	/* one CPU's value */
const volatile __u32 cpu_stride = 8;	/* round_up(value_size, 8) */
const volatile __u32 nr_cpus = 0;	/* possible CPUs for a per-CPU map, else 0 */
const volatile __u32 out_slots = 1;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, 8);
} target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, 16);
} out SEC(".maps");

/* The run's parameters and counters (a copy of the context the callback can reach). */
struct map_exec_args run;
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
	const struct map_exec_term *t = &run.terms[i];
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

	if (!run.nterms)
		return true;
	for (__u32 i = 0; i < MAP_EXEC_MAX_TERMS && i < run.nterms; i++) {
		if (clause && !term_holds(key, value, i))
			clause = false;
		if (run.terms[i].clause_end) {
			if (clause)
				return true;
			clause = true;
		}
	}
	return false;
}

/* Copy key and value into out slot run.emitted; false when out is full. */
static __always_inline bool copy_out(const void *key, const void *value)
{
	__u32 slot = run.emitted;
	__u8 *rec;

	if (run.emitted >= out_slots)
		return false;
	rec = bpf_map_lookup_elem(&out, &slot);
	if (!rec)
		return false;
	bpf_probe_read_kernel(rec, key_size, key);
	if (!nr_cpus) {
		bpf_probe_read_kernel(rec + key_stride, value_size, value);
		return true;
	}
	for (__u32 cpu = 0; cpu < MAP_EXEC_MAX_CPUS && cpu < nr_cpus; cpu++) {
		const void *v = bpf_map_lookup_percpu_elem(&target, key, cpu);

		if (v)
			bpf_probe_read_kernel(rec + key_stride + cpu * cpu_stride, value_size, v);
	}
	return true;
}

static long visit(struct bpf_map *map, const void *key, void *value, void *ctx)
{
	bool emit;

	if (!matches(key, value))
		return 0;
	if (run.action == MAP_EXEC_DELETE) {
		/* An update since the walk reached this element replaced it: judge the new one. */
		void *now = bpf_map_lookup_elem(&target, key);

		if (!now)
			return 0;
		if (now != value && !nr_cpus && !matches(key, now)) {
			run.rechecked_out++;
			return 0;
		}
		value = now;
	}
	emit = run.emit && run.action != MAP_EXEC_COUNT && run.selected >= run.skip;
	if (emit && !copy_out(key, value)) {
		run.stopped = MAP_EXEC_OUT_FULL;
		return 1;
	}
	if (run.action == MAP_EXEC_DELETE) {
		if (bpf_map_delete_elem(&target, key))
			return 0;	/* someone else deleted it first: the slot is reused */
		run.deleted++;
	}
	run.selected++;
	if (emit)
		run.emitted++;
	if (run.max_selected && run.selected >= run.max_selected) {
		run.stopped = MAP_EXEC_LIMIT;
		return 1;
	}
	return 0;
}

SEC("syscall")
int map_exec(struct map_exec_args *args)
{
	__builtin_memcpy(&run, args, sizeof(run));
	run.now = bpf_ktime_get_ns();
	run.selected = run.deleted = run.emitted = run.rechecked_out = 0;
	run.stopped = MAP_EXEC_WALKED;
	for (__u32 i = 0; i < MAP_EXEC_MAX_TERMS; i++) {
		struct map_exec_term *t = &run.terms[i];
		__s64 operand;

		fixed[i] = 0;
		if (!t->relative)
			continue;
		operand = (__s64)run.now + t->operand;
		t->operand = operand;
		if (operand < 0 && !t->is_signed)	/* no unsigned value is below it */
			fixed[i] = (t->op == MAP_EXEC_NE || t->op == MAP_EXEC_GT ||
				    t->op == MAP_EXEC_GE) ? 2 : 1;
	}
	run.visited = bpf_for_each_map_elem(&target, visit, NULL, 0);
	__builtin_memcpy(args, &run, sizeof(run));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
