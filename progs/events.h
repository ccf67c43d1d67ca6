/* The event producer's layouts, shared by events.bpf.c and Python (which reads them back
 * from the object's BTF: nothing here is retyped on the Python side). */
#ifndef BPFBATCH_EVENTS_H
#define BPFBATCH_EVENTS_H

/* Bytes of payload a variable-size event may carry after its header. */
#define EVENT_DATA_MAX 64

/* Where each event goes (event_config.outputs, a bit set). */
#define EVENT_TO_RINGBUF 1
#define EVENT_TO_PERF 2

/* The fixed-size event: 32 bytes, what the benches and the loss tests read. */
struct event {
	__u64 ts;   /* bpf_ktime_get_ns() when produced */
	__u64 seq;  /* the producer's sequence number: one per event attempted, from 0 */
	__u32 pid;  /* the process (tgid) that triggered it */
	__u32 cpu;  /* the CPU it was produced on */
	__u32 id;   /* the syscall number (tracepoint) or the index within a run (run program) */
	__u32 size; /* bytes of this record: sizeof(struct event), or more for struct event_var */
};

/* The variable-size event: the header, then `head.size - sizeof(struct event)` bytes of data
 * (the low byte of seq, repeated). Only the used bytes are sent: records of this type are
 * between 32 and 96 bytes long. */
struct event_var {
	struct event head;
	__u8 data[EVENT_DATA_MAX];
};

/* The producer's configuration: one element of the `events_config` array map, read per event, so
 * it can change while the programs run. Zero (the map's initial value) means: every process,
 * every syscall, no outputs (nothing produced until a consumer says where to). */
struct event_config {
	__u32 target_pid; /* tracepoint: only this process (tgid); 0 = every process */
	__u32 target_nr;  /* tracepoint: only this syscall number; 0 = every syscall */
	__u32 outputs;    /* EVENT_TO_RINGBUF | EVENT_TO_PERF */
	__u32 data_max;   /* 0: struct event; N (<= EVENT_DATA_MAX): struct event_var carrying
			   * seq % (N + 1) data bytes */
	__u32 discard_every; /* ring buffer, fixed events: every Nth reserved record is discarded
			      * (bpf_ringbuf_discard) instead of submitted; 0 = none */
	__u32 per_run;    /* the run program: events emitted per BPF_PROG_RUN */
};

#endif
