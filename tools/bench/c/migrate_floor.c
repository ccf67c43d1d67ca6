/* The C floor of `bpfbatch migrate`: one batch read of every entry of FROM, one batch write
 * of as many entries into TO, no conversion at all (each TO value is the first bytes of the
 * FROM value, zero-padded: what a copy between layouts costs before any field is touched).
 *
 *   migrate_floor FROM_ID TO_ID BATCH
 *
 * Keys must be the same size in both maps. Prints the number of entries written; exits
 * non-zero with a message on any failure.
 */
#include <errno.h>
#include <stdlib.h>

#include "floor.h"

#define PROG "migrate_floor"

int main(int argc, char **argv)
{
	struct bpf_map_info from = {}, to = {};
	int in_fd, out_fd, err = 0;
	__u32 batch, count, total = 0, written;
	size_t key_size, from_stride, to_stride, capacity;
	char *keys, *values, *out;
	void *token, *at = NULL;

	if (argc != 4)
		return fprintf(stderr, "usage: " PROG " FROM_ID TO_ID BATCH\n"), 2;
	in_fd = floor_open(PROG, argv[1], &from);
	out_fd = floor_open(PROG, argv[2], &to);
	if (in_fd < 0 || out_fd < 0)
		return 1;
	if (from.key_size != to.key_size)
		return fprintf(stderr, PROG ": key sizes differ\n"), 1;
	batch = atoi(argv[3]);
	key_size = from.key_size;
	from_stride = floor_value_stride(&from);
	to_stride = floor_value_stride(&to);
	capacity = from.max_entries;
	keys = malloc(capacity * key_size);
	values = malloc(capacity * from_stride);
	token = floor_token(&from);
	if (!keys || !values || !token)
		return floor_fail(PROG, "malloc", ENOMEM);
	while (!err && total < capacity) {
		count = batch < capacity - total ? batch : capacity - total;
		err = bpf_map_lookup_batch(in_fd, at, token, keys + total * key_size,
					   values + total * from_stride, &count, NULL);
		if (err && err != -ENOENT)
			return floor_fail(PROG, "bpf_map_lookup_batch", err);
		total += count;
		at = token;
	}
	out = calloc(total ? total : 1, to_stride);
	if (!out)
		return floor_fail(PROG, "malloc", ENOMEM);
	for (__u32 i = 0; i < total; i++)
		memcpy(out + i * to_stride, values + i * from_stride,
		       from_stride < to_stride ? from_stride : to_stride);
	for (__u32 done = 0; done < total; done += written) {
		written = total - done < batch ? total - done : batch;
		err = bpf_map_update_batch(out_fd, keys + done * key_size, out + done * to_stride,
					   &written, NULL);
		if (err)
			return floor_fail(PROG, "bpf_map_update_batch", err);
	}
	printf("%u\n", total);
	return 0;
}
