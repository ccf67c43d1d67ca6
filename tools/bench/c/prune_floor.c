/* The C peers of the prune benchmark: how flow tables are pruned from user space today, with
 * no Python in the way. Delete every element whose u64 at OFFSET of the value is below CUTOFF.
 *
 *   prune_floor perkey MAP_ID OFFSET CUTOFF        get_next_key + lookup per element, delete
 *                                                  the expired (the next key is fetched first)
 *   prune_floor batch  MAP_ID OFFSET CUTOFF BATCH  lookup_batch the whole map, then one
 *                                                  delete_elem per expired key (Cilium's GC)
 *
 * Prints the number of elements deleted; exits non-zero with a message on any failure.
 */
#include <errno.h>

#include "floor.h"

#define PROG "prune_floor"

static int expired(const char *value, long offset, __u64 cutoff)
{
	__u64 ts;

	memcpy(&ts, value + offset, sizeof(ts));
	return ts < cutoff;
}

static int perkey(int fd, const struct bpf_map_info *info, long offset, __u64 cutoff)
{
	char *key = malloc(info->key_size), *next = malloc(info->key_size);
	char *value = malloc(floor_value_stride(info));
	long deleted = 0;
	int have;

	if (!key || !next || !value)
		return floor_fail(PROG, "malloc", ENOMEM);
	have = bpf_map_get_next_key(fd, NULL, key) == 0;
	while (have) {
		/* The successor first: after a delete, get_next_key would restart from the top. */
		have = bpf_map_get_next_key(fd, key, next) == 0;
		if (bpf_map_lookup_elem(fd, key, value) == 0 && expired(value, offset, cutoff))
			deleted += bpf_map_delete_elem(fd, key) == 0;
		memcpy(key, next, info->key_size);
	}
	printf("%ld\n", deleted);
	return 0;
}

static int batch(int fd, const struct bpf_map_info *info, long offset, __u64 cutoff, __u32 size)
{
	size_t stride = floor_value_stride(info), ks = info->key_size;
	char *batch_keys = malloc(size * ks), *values = malloc(size * stride);
	char *doomed = malloc((size_t)info->max_entries * ks);
	void *token = floor_token(info), *in = NULL;
	long n = 0, deleted = 0;
	__u32 count;
	int err;

	if (!batch_keys || !values || !doomed || !token)
		return floor_fail(PROG, "malloc", ENOMEM);
	do {	/* read the whole map first, keeping the expired keys */
		count = size;
		err = bpf_map_lookup_batch(fd, in, token, batch_keys, values, &count, NULL);
		if (err && err != -ENOENT)
			return floor_fail(PROG, "bpf_map_lookup_batch", err);
		for (__u32 i = 0; i < count; i++)
			if (expired(values + i * stride, offset, cutoff))
				memcpy(doomed + n++ * ks, batch_keys + i * ks, ks);
		in = token;
	} while (!err);
	for (long i = 0; i < n; i++)	/* then delete them, whatever happened since */
		deleted += bpf_map_delete_elem(fd, doomed + i * ks) == 0;
	printf("%ld\n", deleted);
	return 0;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info = {};
	int fd;

	if (argc < 5 || (strcmp(argv[1], "perkey") && strcmp(argv[1], "batch")) ||
	    (!strcmp(argv[1], "batch") && argc < 6)) {
		fprintf(stderr, "usage: %s perkey|batch MAP_ID OFFSET CUTOFF [BATCH]\n", PROG);
		return 2;
	}
	fd = floor_open(PROG, argv[2], &info);
	if (fd < 0)
		return 1;
	if (!strcmp(argv[1], "perkey"))
		return perkey(fd, &info, atol(argv[3]), strtoull(argv[4], NULL, 10));
	return batch(fd, &info, atol(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]));
}
