/* The C floor for the write-side benchmarks: libbpf's batch calls with no Python in the way.
 *
 *   write_floor clear-delete MAP_ID BATCH   lookup_batch a batch of keys, delete_batch them, repeat
 *   write_floor drain        MAP_ID BATCH   lookup_and_delete_batch until the map is empty
 *   write_floor update       MAP_ID N BATCH [THREADS]
 *                                           update_batch N records: key = index (first 4
 *                                           bytes), value = index (first 8 bytes), rest zero;
 *                                           THREADS (default 1) threads at once, each one
 *                                           writing its own contiguous range of indexes
 *
 * Prints the number of elements handled; exits non-zero with a message on any failure.
 */
#include <errno.h>
#include <pthread.h>
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

struct range {
	int fd;
	const struct bpf_map_info *info;
	long start, end;
	__u32 batch;
	int err;
};

/* Write the records of indexes start..end-1; the error, if any, in r->err. */
static void *update_range(void *arg)
{
	struct range *r = arg;
	size_t ks = r->info->key_size, vs = floor_value_stride(r->info);
	char *keys = calloc(r->batch, ks), *values = calloc(r->batch, vs);
	long done = r->start, i;
	__u32 count;

	if (!keys || !values) {
		r->err = -ENOMEM;
		return NULL;
	}
	while (done < r->end && !r->err) {
		count = r->end - done < r->batch ? r->end - done : r->batch;
		for (i = 0; i < count; i++) {
			__u32 k = done + i;
			__u64 v = done + i;

			memcpy(keys + i * ks, &k, sizeof(k));
			memcpy(values + i * vs, &v, sizeof(v));
		}
		r->err = bpf_map_update_batch(r->fd, keys, values, &count, NULL);
		done += count;
	}
	free(keys);
	free(values);
	return NULL;
}

static int update(int fd, const struct bpf_map_info *info, long n, __u32 batch, int threads)
{
	struct range ranges[64];
	pthread_t ids[64];
	int t, err;

	if (threads < 1 || threads > 64)
		return floor_fail(PROG, "THREADS must be 1..64", EINVAL);
	for (t = 0; t < threads; t++) {
		ranges[t] = (struct range){fd, info, n * t / threads, n * (t + 1) / threads, batch, 0};
		if (t && (err = pthread_create(&ids[t], NULL, update_range, &ranges[t])))
			return floor_fail(PROG, "pthread_create", -err);
	}
	update_range(&ranges[0]);
	for (t = 1; t < threads; t++)
		pthread_join(ids[t], NULL);
	for (t = 0; t < threads; t++)
		if (ranges[t].err)
			return floor_fail(PROG, "bpf_map_update_batch", ranges[t].err);
	printf("%ld\n", n);
	return 0;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info = {};
	int fd;

	if (argc < 4) {
		fprintf(stderr, "usage: " PROG " clear-delete|drain MAP_ID BATCH\n"
				"       " PROG " update MAP_ID N BATCH [THREADS]\n");
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
	if (!strcmp(argv[1], "update") && (argc == 5 || argc == 6))
		return update(fd, &info, atol(argv[3]), atoi(argv[4]), argc == 6 ? atoi(argv[5]) : 1);
	fprintf(stderr, PROG ": unknown mode '%s'\n", argv[1]);
	return 2;
}
