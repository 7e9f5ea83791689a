// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// The packet facts main hands to the programs it tail-calls (policy): one
// per-CPU scratch entry, written by main right before its tail call and
// read by the callee in the same chain run on the same CPU (TC and
// BPF_PROG_TEST_RUN run the chain without preemption). Mirrored by
// bpf/src/layout.rs (PacketState); a layout change is a new map version.
//
// The map is pinned by name under felix's pin root (the loaders set libbpf's
// pin_root_path), so every object that includes this header -- fast main,
// debug main, the policy interpreter -- shares one map without the loader
// passing its fd, and teardown's removal of the root removes it.

#ifndef FELIX_STATE_H
#define FELIX_STATE_H

#include "cali.h"

#define CALI_ST_PORTS 0x1 // sport/dport are valid (TCP, UDP, SCTP)
#define CALI_ST_ICMP  0x2 // icmp_type/code are valid (ICMP of the IP version)

// IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d) so that nets and
// IP-set members of both versions compare as 16 bytes.
struct cali_state {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport; // host order
	__u16 dport; // host order
	__u8 ip_ver; // 4 or 6
	__u8 proto;
	__u8 icmp_type;
	__u8 icmp_code;
	__u32 flags; // CALI_ST_*
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct cali_state);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cali_state2 SEC(".maps");

#ifndef IPPROTO_SCTP
#define IPPROTO_SCTP 132
#endif

// Fills the state entry from an Ethernet + IPv4/IPv6 packet that main's
// parse() accepted. Returns 0, or -1 when there is no state entry or the
// headers are unreadable (the caller drops: never run policy on stale facts).
static __always_inline int cali_state_fill(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	struct cali_state *st = bpf_map_lookup_elem(&cali_state2, &zero);
	__u8 *l4;
	__u8 icmp_proto;

	if (!st || (void *)(eth + 1) > end)
		return -1;
	__builtin_memset(st, 0, sizeof(*st));
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return -1;
		st->ip_ver = 4;
		st->proto = ip->protocol;
		st->src[10] = 0xff;
		st->src[11] = 0xff;
		st->dst[10] = 0xff;
		st->dst[11] = 0xff;
		__builtin_memcpy(&st->src[12], &ip->saddr, 4);
		__builtin_memcpy(&st->dst[12], &ip->daddr, 4);
		l4 = (void *)ip + ip->ihl * 4;
		icmp_proto = IPPROTO_ICMP;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return -1;
		st->ip_ver = 6;
		st->proto = ip6->nexthdr;
		__builtin_memcpy(st->src, &ip6->saddr, 16);
		__builtin_memcpy(st->dst, &ip6->daddr, 16);
		l4 = (void *)(ip6 + 1);
		icmp_proto = IPPROTO_ICMPV6;
	} else {
		return -1;
	}
	if (st->proto == IPPROTO_TCP || st->proto == IPPROTO_UDP || st->proto == IPPROTO_SCTP) {
		if ((void *)(l4 + 4) > end)
			return -1;
		st->sport = (__u16)l4[0] << 8 | l4[1];
		st->dport = (__u16)l4[2] << 8 | l4[3];
		st->flags |= CALI_ST_PORTS;
	} else if (st->proto == icmp_proto) {
		if ((void *)(l4 + 2) > end)
			return -1;
		st->icmp_type = l4[0];
		st->icmp_code = l4[1];
		st->flags |= CALI_ST_ICMP;
	}
	return 0;
}

#endif
