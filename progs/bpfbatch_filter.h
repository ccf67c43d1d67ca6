/* bpfbatch filter contract: what a BPF object must be for `bpfbatch exec --filter-obj`.
 *
 * A filter is one function, called once per element of the user's map:
 *
 *     static long bpfbatch_filter(const void *key, void *value)
 *
 * returning BPFBATCH_KEEP (not selected), BPFBATCH_SELECT (count, dump or delete it, as
 * --action says) or BPFBATCH_STOP (not selected, and end the walk here). Write it, then expand
 * BPFBATCH_FILTER_PROGRAM(name) once: that defines the syscall program `name` that the runner
 * (bpfbatch/exec/walker.py) loads and runs. Everything else — the walk, the action, the re-check
 * before a delete, the output array and the resume protocol — is this header's, shared with
 * bpfbatch's own predicate interpreter (map_exec.bpf.c), so a filter behaves exactly like
 * `--where`:
 *
 *   - the walk is bpf_for_each_map_elem over the map `target`, which bpfbatch points at the
 *     user's map (bpf_map__reuse_fd) before load: the verifier checks the filter's reads
 *     against that map's real key and value sizes (a read past them is rejected at load);
 *   - for a delete, a selected element is looked up again by key, copied, and the filter is
 *     called again on what the map holds then; the element is deleted, then compared with the
 *     copy: one a writer wrote in between is put back from the same run (BPF_NOEXIST, every
 *     CPU's value). What remains: a write through a pointer looked up before the delete that
 *     lands after the compare, and on a plain or LRU hash an update replacing the element
 *     between the last lookup and the delete;
 *   - selected records go to the mmap-able array `out`; when it fills (or a delete reaches
 *     the runner's batch) the run stops, the runner hands the records on and runs the program
 *     again: a dump skips what it already has, a delete passes over the elements the last run
 *     kept (checked by the key it kept last);
 *   - per-CPU maps: `value` is the current CPU's slot; read the others with
 *     bpf_map_lookup_percpu_elem(&target, key, cpu) for cpu < nr_cpus;
 *   - the filter runs in a sleepable syscall program with migration disabled; it must not keep
 *     state across elements other than in its own globals, which persist across runs.
 *
 * Include "vmlinux.h" (or <linux/bpf.h>) and <bpf/bpf_helpers.h> first, then this header
 * (next to it: map_exec.h). Names this header takes: the maps `target` and `out`, the .rodata
 * constants below, `bpfbatch_run` and everything prefixed bpfbatch_/BPFBATCH_. Build with
 *     clang -g -O2 -target bpf -I<dir of this header> -c filter.bpf.c -o filter.bpf.o
 * (-g: the runner reads struct map_exec_args from the object's BTF).
 */
#ifndef BPFBATCH_FILTER_H
#define BPFBATCH_FILTER_H

#include "map_exec.h"

struct bpf_map;

extern void bpf_preempt_disable(void) __ksym;
extern void bpf_preempt_enable(void) __ksym;

enum bpfbatch_verdict {
	BPFBATCH_KEEP = 0,
	BPFBATCH_SELECT = 1,
	BPFBATCH_STOP = 2,
};

/* Set by the runner before load. */
const volatile __u32 key_size = 4;
const volatile __u32 key_stride = 8;	/* round_up(key_size, 8): where the value starts */
const volatile __u32 value_size = 8;	/* one CPU's value */
const volatile __u32 cpu_stride = 8;	/* round_up(value_size, 8) */
const volatile __u32 nr_cpus = 0;	/* possible CPUs for a per-CPU map, else 0 */
const volatile __u32 out_slots = 1;
/* 0: an out record is the key alone (a selection the runner deletes from itself, with
 * lookup-and-delete: it needs no value, and three times the keys fit per run); no delete in
 * the program then. */
const volatile __u32 values_out = 1;

/* The user's map (bpf_map__reuse_fd replaces this definition with the real one). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, 8);
} target SEC(".maps");

/* One slot of rec_size bytes per record: the key rounded up to 8 bytes, then the value as the
 * syscall ABI lays it out (every possible CPU's slot for per-CPU maps). Sized by the runner. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__uint(key_size, 4);
	__uint(value_size, 16);
} out SEC(".maps");

/* The run's parameters and counters: a copy of the context the callback can reach. */
struct map_exec_args bpfbatch_run;

/* Never used: puts map_exec.h's enums in the object's BTF, where the runner reads their values. */
struct map_exec_enums *bpfbatch_enums;

/* Written by the user (or by map_exec.bpf.c): the verdict on one element. */
static long bpfbatch_filter(const void *key, void *value);

/* The address of each CPU's value of the element being deleted (one address for a plain
 * map), kept to read the element after the delete, when the map no longer finds it by key;
 * and one value, or key, read back through them. */
__u64 bpfbatch_slot[MAP_EXEC_MAX_CPUS];
__u8 bpfbatch_live[MAP_EXEC_MAX_VALUE_SIZE];
__u8 bpfbatch_live_key[MAP_EXEC_MAX_KEY_SIZE];

/* A delete (or a selection the runner then deletes from, checked, itself) resumes where the
 * last run stopped instead of judging again every element it kept: elements visited so far in
 * this run, the last one left in the map (its key, at the stop), so the next run can check it
 * is still where the count says. */
__u64 bpfbatch_seen;
__u64 bpfbatch_last_kept;
__u8 bpfbatch_resume_key[MAP_EXEC_MAX_KEY_SIZE];

/* Copy key and value (every CPU's, for a per-CPU map) into record `rec`, remembering where the
 * element keeps each value; 0 when the element is gone meanwhile. */
static __always_inline int bpfbatch_snapshot(__u8 *rec, const void *key, const void *value)
{
	bpf_probe_read_kernel(rec, key_size, key);
	if (!values_out)
		return 1;
	if (!nr_cpus) {
		bpfbatch_slot[0] = (__u64)value;
		bpf_probe_read_kernel(rec + key_stride, value_size, value);
		return 1;
	}
	for (__u32 cpu = 0; cpu < MAP_EXEC_MAX_CPUS && cpu < nr_cpus; cpu++) {
		const void *v = bpf_map_lookup_percpu_elem(&target, key, cpu);

		if (!v)
			return 0;
		bpfbatch_slot[cpu] = (__u64)v;
		bpf_probe_read_kernel(rec + key_stride + cpu * cpu_stride, value_size, v);
	}
	return 1;
}

/* Whether value_size bytes at a and b are equal. */
static __always_inline bool bpfbatch_same(const __u8 *a, const __u8 *b, __u32 size)
{
	__u32 i = 0;

	for (; i + 8 <= size && i < MAP_EXEC_MAX_VALUE_SIZE; i += 8)
		if (*(const __u64 *)(a + i) != *(const __u64 *)(b + i))
			return false;
	for (; i < size && i < MAP_EXEC_MAX_VALUE_SIZE; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

/* After the delete: whether the element now holds something else than the record taken
 * before it was judged, i.e. a writer wrote it since (in place, through a pointer it looked
 * up before the delete; or, per-CPU maps, an update, which writes in place there). An
 * element handed to another key meanwhile does not count: that is a reuse of memory already
 * ours, not a write to our key (putting it back would give our key the other one's values).
 * `elem_key`: the key of the element the walk visited. */
static __always_inline bool bpfbatch_written(const __u8 *rec, const void *elem_key)
{
	__u32 n = nr_cpus ? nr_cpus : 1;

	for (__u32 cpu = 0; cpu < MAP_EXEC_MAX_CPUS && cpu < n; cpu++) {
		bpf_probe_read_kernel(bpfbatch_live, value_size, (const void *)bpfbatch_slot[cpu]);
		if (!bpfbatch_same(bpfbatch_live, rec + key_stride + cpu * cpu_stride, value_size))
			goto changed;
	}
	return false;
changed:
	/* A per-CPU element's key is where the walk found it (its values are elsewhere); a
	 * plain one's sits right before its value. */
	bpf_probe_read_kernel(bpfbatch_live_key, key_size,
			      nr_cpus ? elem_key : (const void *)(bpfbatch_slot[0] - key_stride));
	for (__u32 i = 0; i < key_size && i < MAP_EXEC_MAX_KEY_SIZE; i++)
		if (bpfbatch_live_key[i] != rec[i])
			return false;
	return true;
}

/* Put the element back as it is now (BPF_NOEXIST: a writer that re-created the key keeps
 * its own, -EEXIST). A per-CPU map's update from a program sets the current CPU's value and
 * zeroes the others, so those are written right after, from the record. */
static __always_inline long bpfbatch_put_back(__u8 *rec)
{
	__u32 n = nr_cpus ? nr_cpus : 1, here = 0;
	long err;

	for (__u32 cpu = 0; cpu < MAP_EXEC_MAX_CPUS && cpu < n; cpu++)
		bpf_probe_read_kernel(rec + key_stride + cpu * cpu_stride, value_size,
				      (const void *)bpfbatch_slot[cpu]);
	if (nr_cpus) {
		here = bpf_get_smp_processor_id();
		if (here >= nr_cpus || here >= MAP_EXEC_MAX_CPUS)
			return -22;	/* EINVAL: cannot happen, for the verifier */
	}
	err = bpf_map_update_elem(&target, rec, rec + key_stride + here * cpu_stride, BPF_NOEXIST);
	if (err || !nr_cpus)
		return err;
	for (__u32 cpu = 0; cpu < MAP_EXEC_MAX_CPUS && cpu < nr_cpus; cpu++) {
		void *v = cpu == here ? NULL : bpf_map_lookup_percpu_elem(&target, rec, cpu);

		if (v)
			bpf_probe_read_kernel(v, value_size, rec + key_stride + cpu * cpu_stride);
	}
	return 0;
}

/* Count a selected element (and its record); 1 when max_selected ends the run. */
static __always_inline long bpfbatch_selected(struct map_exec_args *run, int emit)
{
	run->selected++;
	if (emit)
		run->emitted++;
	if (run->max_selected && run->selected >= run->max_selected) {
		run->stopped = MAP_EXEC_LIMIT;
		return 1;
	}
	return 0;
}

/* A delete, as safe as the kernel lets a program make it: the element is read again by key
 * (an update may have replaced it since the walk reached it), copied, judged on what it holds
 * then, deleted, and compared with the copy; when a writer wrote it in between it is put
 * back. Returns the walk's verdict: 0 go on, 1 stop. */
static __always_inline long bpfbatch_delete(struct map_exec_args *run, const void *key, int emit)
{
	__u32 slot = emit ? run->emitted : 0;
	void *now = bpf_map_lookup_elem(&target, key);
	__u8 *rec;
	long err;

	if (!now)
		return 0;
	if (emit && slot >= out_slots) {
		run->stopped = MAP_EXEC_OUT_FULL;
		return 1;
	}
	rec = bpf_map_lookup_elem(&out, &slot);
	if (!rec || !bpfbatch_snapshot(rec, key, now))
		return 0;
	if (bpfbatch_filter(key, now) != BPFBATCH_SELECT) {
		run->rechecked_out++;
		return 0;
	}
	/* The judged element must still be the key's, right before the delete: an update that
	 * replaced it since the copy (plain and LRU hashes allocate a new element; an element
	 * handed back and reused shows as a changed value after the delete) makes the next round
	 * judge it again. Preemption stays off from this lookup to the delete, so the window left
	 * for a replacing update is those two calls, not a time slice. */
	bpf_preempt_disable();
	if (bpf_map_lookup_elem(&target, key) != now) {
		bpf_preempt_enable();
		run->rechecked_out++;
		return 0;
	}
	err = bpf_map_delete_elem(&target, key);
	bpf_preempt_enable();
	if (err)
		return 0;	/* someone else deleted it first */
	if (bpfbatch_written(rec, key)) {
		err = bpfbatch_put_back(rec);
		if (!err) {
			run->put_back++;
			return 0;
		}
		if (err == -17) {	/* EEXIST */
			run->superseded++;
			return 0;
		}
		run->put_back_errno = err;
		run->stopped = MAP_EXEC_PUT_BACK_FAILED;
		return 1;
	}
	run->deleted++;
	return bpfbatch_selected(run, emit);
}

/* Copy key and value into out slot bpfbatch_run.emitted; 0 when out is full. */
static __always_inline int bpfbatch_copy_out(const void *key, const void *value)
{
	__u32 slot = bpfbatch_run.emitted;
	__u8 *rec;

	if (bpfbatch_run.emitted >= out_slots)
		return 0;
	rec = bpf_map_lookup_elem(&out, &slot);
	return rec && bpfbatch_snapshot(rec, key, value);
}

/* Whether `key` is the key the last run kept last. */
static __always_inline bool bpfbatch_resumes_at(const __u8 *key)
{
	for (__u32 i = 0; i < key_size && i < MAP_EXEC_MAX_KEY_SIZE; i++)
		if (key[i] != bpfbatch_resume_key[i])
			return false;
	return true;
}

static long bpfbatch_visit(struct bpf_map *map, const void *key, void *value, void *ctx)
{
	struct map_exec_args *run = &bpfbatch_run;
	__u64 index = bpfbatch_seen++;
	long verdict, done;
	int emit;

	if (index < run->resume) {	/* judged by the last run and kept */
		if (index + 1 == run->resume && !bpfbatch_resumes_at(key)) {
			run->stopped = MAP_EXEC_RESUME_LOST;
			return 1;
		}
		bpfbatch_last_kept = (__u64)key;
		return 0;
	}
	verdict = bpfbatch_filter(key, value);
	if (verdict == BPFBATCH_STOP) {
		run->stopped = MAP_EXEC_FILTER_STOP;
		return 1;
	}
	if (run->action == MAP_EXEC_DELETE) {
		__u64 deleted = run->deleted;

		done = verdict == BPFBATCH_SELECT && values_out ?
			bpfbatch_delete(run, key, run->emit) : 0;
		if (run->stopped == MAP_EXEC_OUT_FULL)
			bpfbatch_seen--;	/* not judged: the next run starts with it */
		else if (run->deleted == deleted)
			bpfbatch_last_kept = (__u64)key;
		return done;
	}
	if (verdict != BPFBATCH_SELECT) {
		bpfbatch_last_kept = (__u64)key;
		return 0;
	}
	emit = run->emit && run->action != MAP_EXEC_COUNT && run->selected >= run->skip;
	if (emit && !bpfbatch_copy_out(key, value)) {
		run->stopped = MAP_EXEC_OUT_FULL;
		bpfbatch_seen--;	/* not judged: the next run starts with it */
		return 1;
	}
	return bpfbatch_selected(run, emit);
}

/* Start a run: take the parameters from the context, reset the counters, read the clock. */
static __always_inline void bpfbatch_begin(const struct map_exec_args *args)
{
	__builtin_memcpy(&bpfbatch_run, args, sizeof(bpfbatch_run));
	bpfbatch_run.now = bpf_ktime_get_ns();
	bpfbatch_run.visited = bpfbatch_run.selected = bpfbatch_run.deleted = 0;
	bpfbatch_run.emitted = bpfbatch_run.rechecked_out = 0;
	bpfbatch_run.put_back = bpfbatch_run.superseded = 0;
	bpfbatch_run.put_back_errno = 0;
	bpfbatch_run.resume_next = 0;
	bpfbatch_seen = bpfbatch_last_kept = 0;
	bpfbatch_run.stopped = MAP_EXEC_WALKED;
}

/* Walk the map, then hand the counters back through the context. */
static __always_inline int bpfbatch_walk(struct map_exec_args *args)
{
	bpfbatch_run.visited = bpf_for_each_map_elem(&target, bpfbatch_visit, NULL, 0);
	if (bpfbatch_run.stopped == MAP_EXEC_WALKED && bpfbatch_seen < bpfbatch_run.resume)
		bpfbatch_run.stopped = MAP_EXEC_RESUME_LOST;	/* the map shrank behind the walk */
	if (bpfbatch_run.stopped == MAP_EXEC_OUT_FULL || bpfbatch_run.stopped == MAP_EXEC_LIMIT) {
		/* Where the next run picks up: what this one left behind it (a put-back element
		 * is back at the head of its bucket, behind the walk: still counted). */
		bpfbatch_run.resume_next = bpfbatch_seen - bpfbatch_run.deleted;
		if (bpfbatch_last_kept)
			bpf_probe_read_kernel(bpfbatch_resume_key, key_size,
					      (const void *)bpfbatch_last_kept);
	}
	__builtin_memcpy(args, &bpfbatch_run, sizeof(bpfbatch_run));
	return 0;
}

/* The syscall program `name` running bpfbatch_filter over the map. */
#define BPFBATCH_FILTER_PROGRAM(name)					\
	SEC("syscall") int name(struct map_exec_args *args)		\
	{								\
		bpfbatch_begin(args);					\
		return bpfbatch_walk(args);				\
	}

#endif
