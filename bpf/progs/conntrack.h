// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// felix-rs conntrack: one LRU hash of flows for both IP families, keyed by
// the normalised 5-tuple (the lower (address, port) end is "A"). Each end
// has a leg: the TCP flags it sent and whether its own endpoint's policy
// approved the flow. Layouts are mirrored by bpf/src/conntrack.rs; a change
// to either is a new map version there.
//
// Semantics (the contract the Rust side documents and tests):
// * A packet at an endpoint's hook needs the approval of that endpoint's
//   leg: on the hook where the endpoint sends (its host-side device's TC
//   ingress) the sender's leg, where it receives the receiver's leg; and the
//   approval must come from the same interface (the leg records it).
// * An ICMP error about a flow (its embedded packet's) passes where that
//   flow's packets would; it neither creates nor approves anything.
// * An approved leg lets the packet bypass policy, except a TCP SYN without
//   ACK, which always goes through policy (a retransmitted SYN reaching
//   another endpoint is judged by that endpoint's policy).
// * Policy allowing a packet approves the leg (creating the entry if new).
// * Userspace expires entries (timeouts as upstream's) and removes those of
//   deleted endpoints.

#ifndef FELIX_CONNTRACK_H
#define FELIX_CONNTRACK_H

#include "cali.h"

#define CT_LEG_SYN      0x01 // the leg's end sent a SYN
#define CT_LEG_ACK      0x02 // ... an ACK
#define CT_LEG_FIN      0x04 // ... a FIN
#define CT_LEG_RST      0x08 // ... a RST
#define CT_LEG_APPROVED 0x10 // this end's endpoint policy allowed the flow
#define CT_LEG_OPENER   0x20 // this end sent the first packet we saw
// A host endpoint's policy allowed the flow for this end. The end's own
// workload (if any) keeps its approval and ifindex: a flow from a workload
// out through a host endpoint needs both. The host endpoint's ifindex (low
// 16 bits) sits in the flags' top half.
#define CT_LEG_HEP_APPROVED 0x40
#define CT_LEG_HEP_SHIFT    16

struct ct_key {
	__u8 proto;
	__u8 pad[3];
	__u16 port_a; // host byte order; ICMP echo: the identifier
	__u16 port_b;
	__u32 addr_a[4]; // network byte order; IPv4 as ::ffff:a.b.c.d
	__u32 addr_b[4];
};

struct ct_leg {
	__u32 flags;   // CT_LEG_*
	__u32 ifindex; // host-side ifindex of the hook that approved it (0: none)
};

struct ct_value {
	__u64 created;   // bpf_ktime_get_ns() at creation
	__u64 last_seen; // ... at the last packet
	__u64 rst_seen;  // ... at the first RST (0: none)
	struct ct_leg a;
	struct ct_leg b;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct_key);
	__type(value, struct ct_value);
	__uint(max_entries, 1024); // the loader reuses the pinned map (its size is configured)
} cali_ct SEC(".maps");

// One packet's view of its flow.
struct ct_pkt {
	struct ct_key key;
	__u8 src_is_a;  // the packet's source is end A
	__u8 tcp_flags; // TCP flag byte (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10)
	__u8 valid;
	__u8 related; // an ICMP error about the flow of `key` (its embedded packet)
};

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

// What conntrack says about a packet at a hook.
enum ct_verdict {
	CT_NEW,         // no flow: policy decides
	CT_UNAPPROVED,  // a flow this hook's endpoint has not approved: policy decides
	CT_SYN,         // a SYN on a tracked flow: policy decides (always)
	CT_ESTABLISHED, // this hook's endpoint approved the flow: policy bypassed
};

// Whether (a, pa) sorts after (b, pb) (any fixed total order serves).
static __always_inline int ct_after(const __u32 *a, __u16 pa, const __u32 *b, __u16 pb)
{
	if (a[0] != b[0])
		return a[0] > b[0];
	if (a[1] != b[1])
		return a[1] > b[1];
	if (a[2] != b[2])
		return a[2] > b[2];
	if (a[3] != b[3])
		return a[3] > b[3];
	return pa > pb;
}

// Fills p from the packet (Ethernet first), source as end A until
// normalised. Non-IP and malformed packets leave p->valid 0.
static __noinline void ct_parse(struct __sk_buff *skb, struct ct_pkt *p)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ct_key *k = &p->key;
	__u16 sport = 0, dport = 0;
	__u8 proto;
	void *l4;

	__builtin_memset(p, 0, sizeof(*p));
	if ((void *)(eth + 1) > end)
		return;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return;
		proto = ip->protocol;
		k->addr_a[2] = bpf_htonl(0xffff);
		k->addr_a[3] = ip->saddr;
		k->addr_b[2] = bpf_htonl(0xffff);
		k->addr_b[3] = ip->daddr;
		l4 = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return;
		proto = ip6->nexthdr;
		__builtin_memcpy(k->addr_a, &ip6->saddr, 16);
		__builtin_memcpy(k->addr_b, &ip6->daddr, 16);
		l4 = ip6 + 1;
	} else {
		return;
	}
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcphdr *tcp = l4;
		if ((void *)(tcp + 1) > end)
			return;
		sport = bpf_ntohs(tcp->source);
		dport = bpf_ntohs(tcp->dest);
		p->tcp_flags = ((__u8 *)tcp)[13];
		break;
	}
	case IPPROTO_UDP: {
		struct udphdr *udp = l4;
		if ((void *)(udp + 1) > end)
			return;
		sport = bpf_ntohs(udp->source);
		dport = bpf_ntohs(udp->dest);
		break;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		__u8 *icmp = l4;
		if ((void *)(icmp + 8) > end)
			return;
		// Echo request/reply (v4 8/0, v6 128/129): the identifier on both
		// ends, so a request and its reply are one flow.
		if (icmp[0] == 8 || icmp[0] == 0 || icmp[0] == 128 || icmp[0] == 129) {
			sport = ((__u16)icmp[4] << 8) | icmp[5];
			dport = sport;
			break;
		}
		// An error (v4: unreachable, time exceeded, parameter problem; v6:
		// unreachable, too big, time exceeded, parameter problem) carries the
		// start of the packet it is about: the key is that packet's flow.
		int err = proto == IPPROTO_ICMP ?
			(icmp[0] == 3 || icmp[0] == 11 || icmp[0] == 12) :
			(icmp[0] >= 1 && icmp[0] <= 4);
		if (!err)
			break;
		void *inner = icmp + 8;
		void *il4;
		if (proto == IPPROTO_ICMP) {
			struct iphdr *in = inner;
			if ((void *)(in + 1) > end || in->ihl != 5)
				return;
			k->addr_a[3] = in->saddr;
			k->addr_b[3] = in->daddr;
			proto = in->protocol;
			il4 = in + 1;
		} else {
			struct ipv6hdr *in6 = inner;
			if ((void *)(in6 + 1) > end)
				return;
			__builtin_memcpy(k->addr_a, &in6->saddr, 16);
			__builtin_memcpy(k->addr_b, &in6->daddr, 16);
			proto = in6->nexthdr;
			il4 = in6 + 1;
		}
		if (il4 + 8 > end)
			return;
		if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
			sport = ((__u16)((__u8 *)il4)[0] << 8) | ((__u8 *)il4)[1];
			dport = ((__u16)((__u8 *)il4)[2] << 8) | ((__u8 *)il4)[3];
		} else if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
			sport = ((__u16)((__u8 *)il4)[4] << 8) | ((__u8 *)il4)[5];
			dport = sport;
		}
		p->related = 1;
		break;
	}
	default:
		break;
	}
	k->proto = proto;
	k->port_a = sport;
	k->port_b = dport;
	p->src_is_a = 1;
	if (ct_after(k->addr_a, sport, k->addr_b, dport)) {
		__u32 t;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			t = k->addr_a[i];
			k->addr_a[i] = k->addr_b[i];
			k->addr_b[i] = t;
		}
		k->port_a = dport;
		k->port_b = sport;
		p->src_is_a = 0;
	}
	// An error travels against the packet it is about.
	if (p->related)
		p->src_is_a = !p->src_is_a;
	p->valid = 1;
}

// Whether the hook's endpoint is the packet's sender: a workload's
// host-side TC ingress (and a host endpoint's TC egress) carries what the
// endpoint sends.
static __always_inline int ct_hook_is_sender(__u32 flags)
{
	int ingress = !!(flags & GLOBALS_F_INGRESS);
	return (flags & GLOBALS_F_HEP) ? !ingress : ingress;
}

static __always_inline struct ct_leg *ct_hook_leg(struct ct_value *v, const struct ct_pkt *p, __u32 flags)
{
	// The hook's endpoint is the sender or the receiver of this packet.
	int endpoint_is_a = ct_hook_is_sender(flags) ? p->src_is_a : !p->src_is_a;
	return endpoint_is_a ? &v->a : &v->b;
}

static __always_inline __u32 ct_tcp_leg_flags(__u8 tcp)
{
	__u32 f = 0;
	if (tcp & TCP_SYN)
		f |= CT_LEG_SYN;
	if (tcp & TCP_ACK)
		f |= CT_LEG_ACK;
	if (tcp & TCP_FIN)
		f |= CT_LEG_FIN;
	if (tcp & TCP_RST)
		f |= CT_LEG_RST;
	return f;
}

// Whether the hook (of host-side ifindex `ifindex`, a host endpoint's if
// flags say so) approved this leg.
static __always_inline int ct_leg_approved(const struct ct_leg *leg, __u32 flags, __u32 ifindex)
{
	if (flags & GLOBALS_F_HEP)
		return (leg->flags & CT_LEG_HEP_APPROVED) &&
		       (leg->flags >> CT_LEG_HEP_SHIFT) == (ifindex & 0xffff);
	return (leg->flags & CT_LEG_APPROVED) && leg->ifindex == ifindex;
}

// Approves the leg for the hook.
static __always_inline void ct_leg_approve(struct ct_leg *leg, __u32 flags, __u32 ifindex)
{
	if (ct_leg_approved(leg, flags, ifindex))
		return;
	if (flags & GLOBALS_F_HEP) {
		leg->flags = (leg->flags & 0xffff) | CT_LEG_HEP_APPROVED | ((ifindex & 0xffff) << CT_LEG_HEP_SHIFT);
	} else {
		leg->ifindex = ifindex;
		leg->flags |= CT_LEG_APPROVED;
	}
}

// Looks the packet's flow up, records the sender's TCP flags and the time,
// and says whether this hook (of host-side ifindex `ifindex`) may bypass
// policy: only if its endpoint's leg was approved on this very hook. A leg
// approved by another endpoint the packet reached earlier (routing still
// converging) is no approval here.
static __always_inline enum ct_verdict ct_lookup(const struct ct_pkt *p, __u32 flags, __u32 ifindex)
{
	struct ct_leg *mine;
	struct ct_value *v = bpf_map_lookup_elem(&cali_ct, &p->key);
	struct ct_leg *sender;
	__u64 now;

	if (!v)
		return CT_NEW;
	now = bpf_ktime_get_ns();
	if (p->related) {
		// An error about a flow this hook's endpoint approved passes; it changes
		// nothing in the flow.
		mine = ct_hook_leg(v, p, flags);
		if (ct_leg_approved(mine, flags, ifindex))
			return CT_ESTABLISHED;
		return CT_UNAPPROVED;
	}
	// Both directions' CPUs share the entry: refresh the time at most every
	// 100 ms rather than bounce its cache line on every packet.
	if (now - v->last_seen > 100000000ULL)
		v->last_seen = now;
	if (p->key.proto == IPPROTO_TCP) {
		sender = p->src_is_a ? &v->a : &v->b;
		__u32 add = ct_tcp_leg_flags(p->tcp_flags);
		if ((sender->flags & add) != add)
			sender->flags |= add; // racy but monotonic: a lost bit comes back with the next packet
		if ((p->tcp_flags & TCP_RST) && !v->rst_seen)
			v->rst_seen = now;
		if ((p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)
			return CT_SYN;
	}
	mine = ct_hook_leg(v, p, flags);
	if (ct_leg_approved(mine, flags, ifindex))
		return CT_ESTABLISHED;
	return CT_UNAPPROVED;
}

// Policy allowed the packet at this hook: approve the hook endpoint's leg,
// creating the flow if it is new. Returns the host-side ifindex of the hook
// that approved the receiving end's leg, if the flow is past its opening
// TCP SYN (0 otherwise): a forward may skip the receiver's own program only
// into exactly that interface (the seed's converging-routes rule).
static __always_inline __u32 ct_approve(const struct ct_pkt *p, __u32 flags, __u32 ifindex)
{
	struct ct_value *v;
	struct ct_leg *leg, *recv;

	// Allowing an ICMP error approves nothing of the flow it is about.
	if (p->related)
		return 0;
	v = bpf_map_lookup_elem(&cali_ct, &p->key);

	if (!v) {
		struct ct_value nv = {};
		__u64 now = bpf_ktime_get_ns();
		struct ct_leg *sender = p->src_is_a ? &nv.a : &nv.b;

		nv.created = now;
		nv.last_seen = now;
		sender->flags = CT_LEG_OPENER;
		if (p->key.proto == IPPROTO_TCP) {
			sender->flags |= ct_tcp_leg_flags(p->tcp_flags);
			if (p->tcp_flags & TCP_RST)
				nv.rst_seen = now;
		}
		leg = ct_hook_leg(&nv, p, flags);
		ct_leg_approve(leg, flags, ifindex);
		// Another CPU may have created it meanwhile: then approve that one.
		if (bpf_map_update_elem(&cali_ct, &p->key, &nv, BPF_NOEXIST) == 0)
			return 0;
		v = bpf_map_lookup_elem(&cali_ct, &p->key);
		if (!v)
			return 0;
	}
	leg = ct_hook_leg(v, p, flags);
	ct_leg_approve(leg, flags, ifindex);
	if (p->key.proto == IPPROTO_TCP && (p->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)
		return 0;
	recv = p->src_is_a ? &v->b : &v->a;
	return (recv->flags & CT_LEG_APPROVED) ? recv->ifindex : 0;
}

#endif
