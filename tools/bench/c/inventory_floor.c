/* The C floor of an inventory: count every map given, one process, one pass of
 * bpf_map_lookup_batch per map (arrays not walked: their elements always exist).
 *
 *   inventory_floor BATCH MAP_ID...
 *
 * Prints "id entries" per map; exits non-zero with a message on any failure.
 */
#include <errno.h>
#include <unistd.h>

#include "floor.h"

static const char *prog = "inventory_floor";

static long count(int fd, const struct bpf_map_info *info, __u32 batch)
{
	char *keys, *values;
	void *token, *in = NULL;
	__u32 n;
	long total = 0;
	int err;

	if (info->type == BPF_MAP_TYPE_ARRAY || info->type == BPF_MAP_TYPE_PERCPU_ARRAY)
		return info->max_entries;
	if (batch > info->max_entries)
		batch = info->max_entries;
	keys = malloc((size_t)batch * info->key_size);
	values = malloc(batch * floor_value_stride(info));
	token = floor_token(info);
	if (!keys || !values || !token)
		return floor_fail(prog, "malloc", ENOMEM), -1;
	do {
		n = batch;
		err = bpf_map_lookup_batch(fd, in, token, keys, values, &n, NULL);
		if (err && err != -ENOENT)
			return floor_fail(prog, "bpf_map_lookup_batch", err), -1;
		total += n;
		in = token;
	} while (!err);
	free(keys);
	free(values);
	free(token);
	return total;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info;
	long n;
	int i, fd;

	if (argc < 3) {
		fprintf(stderr, "usage: inventory_floor BATCH MAP_ID...\n");
		return 2;
	}
	for (i = 2; i < argc; i++) {
		memset(&info, 0, sizeof(info));
		fd = floor_open(prog, argv[i], &info);
		if (fd < 0)
			return 1;
		n = count(fd, &info, atoi(argv[1]));
		if (n < 0)
			return 1;
		printf("%s %ld\n", argv[i], n);
		close(fd);
	}
	return 0;
}
