/* The C floor for read benchmarks: what libbpf's calls cost with no Python in the way.
 *
 *   map_floor lookup-batch  MAP_ID BATCH   one pass of bpf_map_lookup_batch
 *   map_floor lookup-perkey MAP_ID         get_next_key + lookup_elem per key (bpftool's loop)
 *
 * Prints the number of elements seen; exits non-zero with a message on any failure.
 */
#include <errno.h>

#include "floor.h"

static const char *prog = "map_floor";

static int lookup_batch(int fd, const struct bpf_map_info *info, __u32 batch)
{
	char *keys = malloc((size_t)batch * info->key_size);
	char *values = malloc(batch * floor_value_stride(info));
	void *token = floor_token(info), *in = NULL;
	__u32 count;
	long total = 0;
	int err;

	if (!keys || !values || !token)
		return floor_fail(prog, "malloc", ENOMEM);
	do {
		count = batch;
		err = bpf_map_lookup_batch(fd, in, token, keys, values, &count, NULL);
		if (err && err != -ENOENT)
			return floor_fail(prog, "bpf_map_lookup_batch", err);
		total += count;
		in = token;
	} while (!err);
	printf("%ld\n", total);
	return 0;
}

static int lookup_perkey(int fd, const struct bpf_map_info *info)
{
	char *key = malloc(info->key_size), *next = malloc(info->key_size);
	char *value = malloc(floor_value_stride(info));
	void *prev = NULL;
	long total = 0;

	if (!key || !next || !value)
		return floor_fail(prog, "malloc", ENOMEM);
	while (bpf_map_get_next_key(fd, prev, next) == 0) {
		if (bpf_map_lookup_elem(fd, next, value) == 0)
			total++;
		memcpy(key, next, info->key_size);
		prev = key;
	}
	printf("%ld\n", total);
	return 0;
}

int main(int argc, char **argv)
{
	struct bpf_map_info info = {};
	int fd;

	if (argc < 3) {
		fprintf(stderr, "usage: map_floor lookup-batch|lookup-perkey MAP_ID [BATCH]\n");
		return 2;
	}
	fd = floor_open(prog, argv[2], &info);
	if (fd < 0)
		return 1;
	if (!strcmp(argv[1], "lookup-batch") && argc == 4)
		return lookup_batch(fd, &info, atoi(argv[3]));
	if (!strcmp(argv[1], "lookup-perkey"))
		return lookup_perkey(fd, &info);
	fprintf(stderr, "map_floor: unknown mode '%s'\n", argv[1]);
	return 2;
}
