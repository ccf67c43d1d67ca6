/* Shared by the C floors of tools/bench: error exit and the per-element value size of the
 * batch syscalls (round_up(value_size, 8) per possible CPU for per-CPU maps). */
#ifndef BPFBATCH_FLOOR_H
#define BPFBATCH_FLOOR_H

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int floor_fail(const char *prog, const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(err < 0 ? -err : err));
	return 1;
}

static inline size_t floor_value_stride(const struct bpf_map_info *info)
{
	switch (info->type) {
	case BPF_MAP_TYPE_PERCPU_HASH:
	case BPF_MAP_TYPE_PERCPU_ARRAY:
	case BPF_MAP_TYPE_LRU_PERCPU_HASH:
		return ((info->value_size + 7) & ~7u) * libbpf_num_possible_cpus();
	default:
		return info->value_size;
	}
}

/* The batch calls' in/out token: a u32 bucket index for the hash family but a whole key for
 * the generic batch ops (arrays, LPM trie), so max(key_size, 4) bytes; NULL if out of memory. */
static inline void *floor_token(const struct bpf_map_info *info)
{
	return calloc(1, info->key_size > 4 ? info->key_size : 4);
}

/* The fd of map ``id`` with its info filled in, or -1 after printing why. */
static int floor_open(const char *prog, const char *id, struct bpf_map_info *info)
{
	__u32 len = sizeof(*info);
	int fd = bpf_map_get_fd_by_id(atoi(id)), err;

	if (fd < 0)
		return floor_fail(prog, "bpf_map_get_fd_by_id", fd), -1;
	err = bpf_obj_get_info_by_fd(fd, info, &len);
	if (err)
		return floor_fail(prog, "bpf_obj_get_info_by_fd", err), -1;
	return fd;
}

#endif
