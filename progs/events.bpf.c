// SPDX-License-Identifier: GPL-2.0
/* events: a producer of ring buffer and perf buffer events, for the record command's tests,
 * its benches and the demo.
 *
 * Two triggers emit the same events (events.h):
 * - the syscall tracepoint (tp_btf/sys_enter, raw_tp/sys_enter as the fallback): one event per
 *   syscall of the configured process, the demo's steady trickle;
 * - `emit_run`, a raw_tp program with no attach point, run from user space with BPF_PROG_RUN:
 *   `per_run` events per run through bpf_loop, on the CPU that runs it. raw_tp is the type
 *   that may both run from user space and call bpf_perf_event_output (a `syscall` program has
 *   the ring buffer helpers but not the perf one), so both outputs are fed at any rate.
 *
 * Every event attempted takes the next sequence number (`next_seq`); what the producer could
 * not hand over is counted, so a consumer's loss is provable: events delivered = next_seq -
 * ringbuf_failures - ringbuf_discarded (ring buffer) or - perf_failures (perf), and their
 * sequence numbers are exactly the rest.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "events.h"

#define EVENT_RINGBUF_BYTES (1 << 20)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENT_RINGBUF_BYTES); /* the loader may resize it (a power of 2) */
} events_rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events_perf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event_config);
} events_config SEC(".maps");

/* Where a variable-size event is built before it is copied out (too big for the stack of a
 * bpf_loop callback with room to spare). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event_var);
} scratch SEC(".maps");

/* The producer's own accounting (see the file's comment). */
__u64 next_seq = 0;
__u64 ringbuf_failures = 0;  /* bpf_ringbuf_reserve/bpf_ringbuf_output refused: ring full */
__u64 ringbuf_discarded = 0; /* reserved, then bpf_ringbuf_discard'ed (discard_every) */
__u64 perf_failures = 0;     /* bpf_perf_event_output failed: ring full or no reader */

/* Pin the two types into the object's BTF, where `record --type` looks them up. */
struct event _event_btf = {};
struct event_var _event_var_btf = {};

static __always_inline void fill(struct event *e, __u64 seq, __u32 id, __u32 size)
{
	e->ts = bpf_ktime_get_ns();
	e->seq = seq;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->cpu = bpf_get_smp_processor_id();
	e->id = id;
	e->size = size;
}

static __always_inline void emit_fixed(void *ctx, const struct event_config *cfg, __u32 id)
{
	__u64 seq = __sync_fetch_and_add(&next_seq, 1);
	struct event *e, local;

	if (cfg->outputs & EVENT_TO_RINGBUF) {
		e = bpf_ringbuf_reserve(&events_rb, sizeof(*e), 0);
		if (!e) {
			__sync_fetch_and_add(&ringbuf_failures, 1);
		} else {
			fill(e, seq, id, sizeof(*e));
			if (cfg->discard_every && seq % cfg->discard_every == 0) {
				bpf_ringbuf_discard(e, 0);
				__sync_fetch_and_add(&ringbuf_discarded, 1);
			} else {
				bpf_ringbuf_submit(e, 0);
			}
		}
	}
	if (cfg->outputs & EVENT_TO_PERF) {
		fill(&local, seq, id, sizeof(local));
		if (bpf_perf_event_output(ctx, &events_perf, BPF_F_CURRENT_CPU, &local,
					  sizeof(local)))
			__sync_fetch_and_add(&perf_failures, 1);
	}
}

static __always_inline void emit_var(void *ctx, const struct event_config *cfg, __u32 id)
{
	__u64 seq = __sync_fetch_and_add(&next_seq, 1);
	__u32 zero = 0, i;
	struct event_var *e = bpf_map_lookup_elem(&scratch, &zero);
	__u64 len, size;

	if (!e)
		return;
	len = seq % ((cfg->data_max > EVENT_DATA_MAX ? EVENT_DATA_MAX : cfg->data_max) + 1);
	for (i = 0; i < EVENT_DATA_MAX; i++)
		e->data[i] = i < len ? (__u8)seq : 0;
	barrier_var(len); /* keep the check below for the verifier (clang knows it is true) */
	if (len > EVENT_DATA_MAX)
		return;
	size = sizeof(struct event) + len;
	fill(&e->head, seq, id, size);
	if ((cfg->outputs & EVENT_TO_RINGBUF) && bpf_ringbuf_output(&events_rb, e, size, 0))
		__sync_fetch_and_add(&ringbuf_failures, 1);
	if ((cfg->outputs & EVENT_TO_PERF) &&
	    bpf_perf_event_output(ctx, &events_perf, BPF_F_CURRENT_CPU, e, size))
		__sync_fetch_and_add(&perf_failures, 1);
}

static __always_inline void emit(void *ctx, const struct event_config *cfg, __u32 id)
{
	if (cfg->data_max)
		emit_var(ctx, cfg, id);
	else
		emit_fixed(ctx, cfg, id);
}

static __always_inline const struct event_config *current_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&events_config, &zero);
}

static __always_inline int on_syscall(void *ctx, long nr)
{
	const struct event_config *cfg = current_config();

	if (!cfg || !cfg->outputs)
		return 0;
	if (cfg->target_pid && (bpf_get_current_pid_tgid() >> 32) != cfg->target_pid)
		return 0;
	if (cfg->target_nr && nr != cfg->target_nr)
		return 0;
	emit(ctx, cfg, nr);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id)
{
	return on_syscall(ctx, id);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id)
{
	return on_syscall(ctx, id);
}

struct run_state {
	void *ctx;
	const struct event_config *cfg;
};

static long emit_one(__u32 index, struct run_state *state)
{
	emit(state->ctx, state->cfg, index);
	return 0;
}

SEC("raw_tp")
int emit_run(struct bpf_raw_tracepoint_args *ctx)
{
	struct run_state state = { .ctx = ctx, .cfg = current_config() };

	if (!state.cfg || !state.cfg->outputs)
		return 0;
	bpf_loop(state.cfg->per_run, emit_one, &state, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
