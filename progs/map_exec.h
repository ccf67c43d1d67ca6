/* map exec: the parameter table of map_exec.bpf.c, shared with Python. Python retypes none of
 * it: the structs' layout and the enums' values (limits included) are read back from the
 * object's BTF (bpfbatch/exec/contract.py), where struct map_exec_enums puts the enums.
 *
 * A predicate is a disjunction of and-clauses over integer fields of the map's value, compiled
 * by bpfbatch/exec/predicate.py into at most MAP_EXEC_MAX_TERMS terms; the terms of one clause are
 * consecutive and the last one has clause_end set.
 */
#ifndef BPFBATCH_MAP_EXEC_H
#define BPFBATCH_MAP_EXEC_H

/* Limits, as enumerators (not macros) so that they reach the BTF. */
enum map_exec_limit {
	MAP_EXEC_MAX_TERMS = 16,
	/* Loop bound for per-CPU values; the real count is the .rodata variable nr_cpus. */
	MAP_EXEC_MAX_CPUS = 1024,
	/* Largest key and (one CPU's) value the generic program copies out, in bytes. */
	MAP_EXEC_MAX_KEY_SIZE = 512,
	MAP_EXEC_MAX_VALUE_SIZE = 4096,
};

enum map_exec_op {
	MAP_EXEC_EQ = 0,
	MAP_EXEC_NE = 1,
	MAP_EXEC_LT = 2,
	MAP_EXEC_LE = 3,
	MAP_EXEC_GT = 4,
	MAP_EXEC_GE = 5,
};

enum map_exec_action {
	MAP_EXEC_COUNT = 0,	/* count what matches */
	MAP_EXEC_DUMP = 1,	/* copy what matches into the out map */
	MAP_EXEC_DELETE = 2,	/* delete what matches (and copy it out when `emit`) */
};

enum map_exec_stop {
	MAP_EXEC_WALKED = 0,	/* the whole map was visited */
	MAP_EXEC_OUT_FULL = 1,	/* the out map is full: drain it and run again */
	MAP_EXEC_LIMIT = 2,	/* max_selected elements were selected */
	MAP_EXEC_FILTER_STOP = 3,	/* the filter ended the walk (bpfbatch_filter.h) */
	/* A refreshed element could not be put back: its key is in out slot `emitted` and the
	 * error in put_back_errno. */
	MAP_EXEC_PUT_BACK_FAILED = 4,
	/* The element before `resume` is not the one the last run kept last (the map changed
	 * there): run again from the start. */
	MAP_EXEC_RESUME_LOST = 5,
};

/* field OP operand, with field = the integer of `width` bytes at `offset` of the value (or of
 * the key, with in_key). */
struct map_exec_term {
	__s64 operand;		/* the constant; with `relative`, added to bpf_ktime_get_ns() */
	__u16 offset;
	__u8 width;		/* 1, 2, 4 or 8 */
	__u8 is_signed;
	__u8 op;		/* enum map_exec_op */
	__u8 relative;
	__u8 clause_end;	/* the last term of an and-clause */
	__u8 in_key;		/* a field of the key, not of the value */
};

/* The program's context (BPF_PROG_TEST_RUN ctx_in, copied back after the run). */
struct map_exec_args {
	/* in */
	__u32 action;		/* enum map_exec_action */
	__u32 nterms;		/* 0: every element matches */
	__u32 emit;		/* copy each selected element to the out map */
	__u32 pad;
	__u64 skip;		/* selected elements to pass over before emitting (dump resumes) */
	__u64 max_selected;	/* stop after this many (0: no limit) */
	__u64 resume;		/* pass over this many elements, judged by the last run */
	struct map_exec_term terms[MAP_EXEC_MAX_TERMS];
	/* out */
	__u64 now;		/* bpf_ktime_get_ns() at the start of the run */
	__u64 visited;		/* elements the walk visited */
	__u64 selected;		/* elements that matched (skipped ones included) */
	__u64 deleted;
	__u64 emitted;		/* records written to the out map, at slots 0..emitted-1 */
	__u64 rechecked_out;	/* selected, then found refreshed by the re-check: kept */
	__u64 put_back;		/* deleted, found written after its judgement, put back */
	__u64 superseded;	/* deleted, written after it, and re-created by a writer first */
	__u32 stopped;		/* enum map_exec_stop */
	__s32 put_back_errno;	/* with MAP_EXEC_PUT_BACK_FAILED */
	__u64 resume_next;	/* a delete that stopped early: `resume` for the next run */
};

/* Every enum above, in one type: an object built on bpfbatch_filter.h refers to it (the
 * bpfbatch_enums pointer), so clang writes all of them into its BTF, unused or not. */
struct map_exec_enums {
	enum map_exec_limit limit;
	enum map_exec_op op;
	enum map_exec_action action;
	enum map_exec_stop stop;
};

#endif
