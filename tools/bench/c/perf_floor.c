/* The C floor for perf event array reads: libbpf's perf_buffer__consume with an empty sample
 * callback (it only counts), no Python in the way.
 *
 *   perf_floor MAP_ID PROG_ID EVENTS_PER_CPU PAGES
 *
 * Opens PAGES-page rings on every CPU (perf_buffer__new stores them in the map), has the
 * producer program PROG_ID (its config already set to write EVENTS_PER_CPU events a run)
 * run once on each CPU with BPF_PROG_RUN, untimed, then consumes until every event was
 * handed to the callback. Prints the records seen and the nanoseconds the consume loop took;
 * exits non-zero with a message on any failure, or if a record was lost.
 */
#include <errno.h>
#include <time.h>

#include "floor.h"

static const char *prog = "perf_floor";

struct counts {
	long seen, lost;
};

static void count_one(void *ctx, int cpu, void *data, __u32 size)
{
	(void)cpu;
	(void)data;
	(void)size;
	((struct counts *)ctx)->seen++;
}

static void count_lost(void *ctx, int cpu, __u64 n)
{
	(void)cpu;
	((struct counts *)ctx)->lost += n;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info = {};
	struct counts counts = {};
	struct perf_buffer *pb;
	struct timespec start, end;
	long want;
	int fd, prog_fd, cpus, cpu, err;

	if (argc != 5) {
		fprintf(stderr, "usage: %s MAP_ID PROG_ID EVENTS_PER_CPU PAGES\n", prog);
		return 2;
	}
	fd = floor_open(prog, argv[1], &info);
	if (fd < 0)
		return 1;
	prog_fd = bpf_prog_get_fd_by_id(atoi(argv[2]));
	if (prog_fd < 0)
		return floor_fail(prog, "bpf_prog_get_fd_by_id", prog_fd);
	pb = perf_buffer__new(fd, atoi(argv[4]), count_one, count_lost, &counts, NULL);
	if (!pb)
		return floor_fail(prog, "perf_buffer__new", errno);
	cpus = libbpf_num_possible_cpus();
	for (cpu = 0; cpu < cpus && (__u32)cpu < info.max_entries; cpu++) {
		LIBBPF_OPTS(bpf_test_run_opts, opts, .flags = BPF_F_TEST_RUN_ON_CPU, .cpu = cpu);

		err = bpf_prog_test_run_opts(prog_fd, &opts);
		if (err)
			return floor_fail(prog, "bpf_prog_test_run_opts", err);
	}
	want = atol(argv[3]) * (cpu < cpus ? cpu : cpus);
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (counts.seen + counts.lost < want) {
		err = perf_buffer__consume(pb);
		if (err < 0)
			return floor_fail(prog, "perf_buffer__consume", err);
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	if (counts.lost)
		return fprintf(stderr, "%s: %ld records lost\n", prog, counts.lost), 1;
	printf("%ld %lld\n", counts.seen, (long long)(end.tv_sec - start.tv_sec) * 1000000000LL +
	       (end.tv_nsec - start.tv_nsec));
	perf_buffer__free(pb);
	return 0;
}
