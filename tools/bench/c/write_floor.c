/* The C floor for the write-side benchmarks: libbpf's batch calls with no Python in the way.
 *
 *   write_floor clear-delete MAP_ID BATCH   lookup_batch a batch of keys, delete_batch them, repeat
 *   write_floor drain        MAP_ID BATCH   lookup_and_delete_batch until the map is empty
 *   write_floor update       MAP_ID N BATCH update_batch N records: key = index (first 4
 *                                           bytes), value = index (first 8 bytes), rest zero
 *
 * Prints the number of elements handled; exits non-zero with a message on any failure.
 */
#include <errno.h>
#include <stdlib.h>

#include "floor.h"

#define PROG "write_floor"

/* One pass of lookup (or lookup-and-delete) batches; with delete_keys, each batch of keys is
 * then removed with bpf_map_delete_batch. */
static int pass(int fd, const struct bpf_map_info *info, __u32 batch, int and_delete,
		int delete_keys)
{
	char *keys = malloc((size_t)batch * info->key_size);
	char *values = malloc((size_t)batch * floor_value_stride(info));
	void *token = floor_token(info), *in = NULL;
	__u32 count, deleted;
	long total = 0;
	int err, del;

	if (!keys || !values || !token)
		return floor_fail(PROG, "malloc", ENOMEM);
	do {
		count = batch;
		err = and_delete ?
			bpf_map_lookup_and_delete_batch(fd, in, token, keys, values, &count, NULL) :
			bpf_map_lookup_batch(fd, in, token, keys, values, &count, NULL);
		if (err && err != -ENOENT)
			return floor_fail(PROG, and_delete ? "bpf_map_lookup_and_delete_batch" :
					"bpf_map_lookup_batch", err);
		if (delete_keys && count) {
			deleted = count;
			del = bpf_map_delete_batch(fd, keys, &deleted, NULL);
			if (del)
				return floor_fail(PROG, "bpf_map_delete_batch", del);
		}
		total += count;
		in = token;
	} while (!err);
	printf("%ld\n", total);
	return 0;
}

static int update(int fd, const struct bpf_map_info *info, long n, __u32 batch)
{
	size_t vs = floor_value_stride(info);
	char *keys = calloc(batch, info->key_size), *values = calloc(batch, vs);
	long done = 0, i;
	__u32 count;
	int err;

	if (!keys || !values)
		return floor_fail(PROG, "calloc", ENOMEM);
	while (done < n) {
		count = n - done < batch ? n - done : batch;
		for (i = 0; i < count; i++) {
			__u32 k = done + i;
			__u64 v = done + i;

			memcpy(keys + i * info->key_size, &k, sizeof(k));
			memcpy(values + i * vs, &v, sizeof(v));
		}
		err = bpf_map_update_batch(fd, keys, values, &count, NULL);
		if (err)
			return floor_fail(PROG, "bpf_map_update_batch", err);
		done += count;
	}
	printf("%ld\n", done);
	return 0;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info = {};
	int fd;

	if (argc < 4) {
		fprintf(stderr, "usage: " PROG " clear-delete|drain MAP_ID BATCH\n"
				"       " PROG " update MAP_ID N BATCH\n");
		return 2;
	}
	fd = floor_open(PROG, argv[2], &info);
	if (fd < 0)
		return 1;
	if (info.key_size < 4 || floor_value_stride(&info) < 8)
		return floor_fail(PROG, "map needs keys of at least 4 and values of at least 8 bytes",
				  EINVAL);
	if (!strcmp(argv[1], "clear-delete"))
		return pass(fd, &info, atoi(argv[3]), 0, 1);
	if (!strcmp(argv[1], "drain"))
		return pass(fd, &info, atoi(argv[3]), 1, 0);
	if (!strcmp(argv[1], "update") && argc == 5)
		return update(fd, &info, atol(argv[3]), atoi(argv[4]));
	fprintf(stderr, PROG ": unknown mode '%s'\n", argv[1]);
	return 2;
}
