/* The C floor for ring buffer reads: libbpf's ring_buffer__consume with an empty callback
 * (it only counts), no Python in the way.
 *
 *   ringbuf_floor MAP_ID EVENTS   consume until EVENTS records were handed to the callback
 *
 * Prints the records seen and the nanoseconds the consume loop took (the process's start-up
 * left out); exits non-zero with a message on any failure.
 */
#include <errno.h>
#include <time.h>

#include "floor.h"

static const char *prog = "ringbuf_floor";

static int count_one(void *ctx, void *data, size_t size)
{
	(void)data;
	(void)size;
	++*(long *)ctx;
	return 0;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info = {};
	struct ring_buffer *rb;
	struct timespec start, end;
	long seen = 0, want;
	int fd, err;

	if (argc != 3) {
		fprintf(stderr, "usage: %s MAP_ID EVENTS\n", prog);
		return 2;
	}
	want = atol(argv[2]);
	fd = floor_open(prog, argv[1], &info);
	if (fd < 0)
		return 1;
	rb = ring_buffer__new(fd, count_one, &seen, NULL);
	if (!rb)
		return floor_fail(prog, "ring_buffer__new", errno);
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (seen < want) {
		err = ring_buffer__consume(rb);
		if (err < 0)
			return floor_fail(prog, "ring_buffer__consume", err);
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	printf("%ld %lld\n", seen, (long long)(end.tv_sec - start.tv_sec) * 1000000000LL +
	       (end.tv_nsec - start.tv_nsec));
	ring_buffer__free(rb);
	return 0;
}
