/* tcptop's record layout, shared by tcptop.bpf.c and Python (which reads it back from the
 * object's BTF: nothing here is retyped on the Python side). */
#ifndef BPFBATCH_TCPTOP_H
#define BPFBATCH_TCPTOP_H

#define TCPTOP_COMM_LEN 16
#define TCPTOP_MAX_FLOWS 65536

/* One flow of one process. Addresses are in network order; an IPv4 address fills the first
 * four bytes and leaves the rest zero. Ports are in host order. */
struct tcptop_key {
	__u8 saddr[16];
	__u8 daddr[16];
	__u32 pid;
	__u16 lport;
	__u16 dport;
	__u16 family;
	__u16 pad;
	char comm[TCPTOP_COMM_LEN];
};

/* Bytes moved by successful sendmsg/recvmsg calls, added atomically. */
struct tcptop_value {
	__u64 sent;
	__u64 received;
};

#endif
