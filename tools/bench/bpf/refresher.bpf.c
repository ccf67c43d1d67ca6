// SPDX-License-Identifier: GPL-2.0
/* The in-place writer of tools/bench/refresher.py: how a datapath refreshes a flow, through a
 * pointer it looked up. For keys 0..nkeys-1 of a u32 -> {u64 packets; u64 last_seen_ns} map
 * (per-CPU: this CPU's value), one run looks the element up, writes it expired
 * (last_seen_ns = 1), waits `gap` bpf_loop turns, then writes it fresh (now) through the same
 * pointer, with preemption disabled as a datapath (softirq) runs: a syscall program may
 * otherwise be preempted between the two writes, on a loaded machine for a whole time slice,
 * which no packet path does. A key not found is marked in the `missing` bit mask for the
 * caller to judge: a prune that deleted it while it was expired lost the refresh that
 * followed, unless it put it back. After the fresh write the key is looked up again: when it
 * no longer resolves to the element written, the fresh write went to an element already
 * deleted (bit k of `window`): the window no prune can close, a write through a pointer
 * looked up before the delete that lands after it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define MAX_KEYS 64

struct flow {
	__u64 packets;
	__u64 last_seen_ns;
};

struct refresh_args {
	__u32 nkeys;
	__u32 gap;
	__u64 cycles;
	__u64 missing;		/* bit k: key k was not found */
	__u64 window;		/* bit k: key k's fresh write landed on a deleted element */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow);
} target SEC(".maps");

volatile __u64 sink;

extern void bpf_preempt_disable(void) __ksym;
extern void bpf_preempt_enable(void) __ksym;

static long spin(__u64 i, void *ctx)
{
	sink++;
	return 0;
}

SEC("syscall")
int refresh(struct refresh_args *args)
{
	__u32 n = args->nkeys < MAX_KEYS ? args->nkeys : MAX_KEYS;

	__u64 missing = 0, window = 0;	/* written to args once: the verifier refuses a
					 * ctx pointer the compiler keeps moved */
	for (__u32 i = 0; i < MAX_KEYS && i < n; i++) {
		__u32 key = i;
		struct flow *f = bpf_map_lookup_elem(&target, &key);

		if (!f) {
			missing |= 1ULL << i;
			continue;
		}
		bpf_preempt_disable();
		f->last_seen_ns = 1;
		if (args->gap)
			bpf_loop(args->gap, spin, NULL, 0);
		f->last_seen_ns = bpf_ktime_get_ns();
		f->packets++;
		if (bpf_map_lookup_elem(&target, &key) != f)
			window |= 1ULL << i;
		bpf_preempt_enable();
		args->cycles++;
	}
	args->missing = missing;
	args->window = window;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
