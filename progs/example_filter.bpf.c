// SPDX-License-Identifier: GPL-2.0
/* An example of the bpfbatch filter contract (bpfbatch_filter.h): select the flows of a
 * flowtable map (flowtable.h) that saw fewer than 10 packets.
 *
 *     bpfbatch exec --pinned /sys/fs/bpf/flows --filter-obj example_filter.bpf.o \
 *         --filter-prog small_flows --action delete
 *
 * does what `--where 'packets < 10'` does, with the predicate compiled into the program.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bpfbatch_filter.h"
#include "flowtable.h"

static long bpfbatch_filter(const void *key, void *value)
{
	const struct flowtable_stats *s = value;

	return s->packets < 10 ? BPFBATCH_SELECT : BPFBATCH_KEEP;
}

BPFBATCH_FILTER_PROGRAM(small_flows)

char LICENSE[] SEC("license") = "GPL";
