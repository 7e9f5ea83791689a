// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// The generic programs of the TC chain: main, accepted and drop. Built twice:
// CALI_DEBUG=0 (fast path) and CALI_DEBUG=1 (debug path, logs with
// bpf_printk); the loader places the two builds at their own slots of the
// generic programs map (debug at PROG_DEBUG_OFFSET).

#include "cali.h"
#include "conntrack.h"
#include "routes.h"
#include "state.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct ifstate_val);
	__uint(max_entries, 1000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} cali_iface SEC(".maps");

#define AF_INET 2
#define AF_INET6 10

// Anti-spoofing: whether a packet a workload sends (its host-side TC
// ingress, host-side ifindex `hostif`) has a source the routes map gives to
// that workload (its own address, or a prefix it may use). IPv6 link-local
// and unspecified sources (neighbour discovery, DHCP) are the interface's own
// business and pass to policy.
static __always_inline int source_ok(struct __sk_buff *skb, __u32 hostif)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u8 src[16] = {};
	struct cali_route_val *r;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return 0;
		if (ip->saddr == 0)
			return 1;
		src[10] = 0xff;
		src[11] = 0xff;
		__builtin_memcpy(&src[12], &ip->saddr, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return 0;
		__builtin_memcpy(src, &ip6->saddr, 16);
		if ((src[0] == 0xfe && (src[1] & 0xc0) == 0x80))
			return 1;
		__u32 *w = (__u32 *)src;
		if ((w[0] | w[1] | w[2] | w[3]) == 0)
			return 1;
	} else {
		return 1;
	}
	r = route_of(src);
	if (!r || !(r->flags & (RT_LOCAL_WORKLOAD | RT_SPOOF_OK)))
		return 0;
	return r->ifindex == hostif;
}

// Parses Ethernet, IPv4/IPv6 and the TCP/UDP/ICMP header. Returns 0 for a
// packet policy should see, 1 for a non-IP frame (passed, e.g. ARP) and -1
// for a truncated or malformed IP packet.
static __always_inline int parse(struct __sk_buff *skb, __u8 *proto, __u8 *icmp_type)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	void *l4;

	if ((void *)(eth + 1) > end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end || ip->ihl < 5)
			return -1;
		*proto = ip->protocol;
		l4 = (void *)ip + ip->ihl * 4;
		CALI_LOG("ipv4 %x -> %x proto %d", bpf_ntohl(ip->saddr), bpf_ntohl(ip->daddr), ip->protocol);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return -1;
		*proto = ip6->nexthdr;
		l4 = ip6 + 1;
		CALI_LOG("ipv6 next header %d", ip6->nexthdr);
	} else {
		CALI_LOG("non-IP ethertype %x", bpf_ntohs(eth->h_proto));
		return 1;
	}
	switch (*proto) {
	case IPPROTO_TCP: {
		struct tcphdr *tcp = l4;
		if ((void *)(tcp + 1) > end)
			return -1;
		CALI_LOG("tcp %d -> %d", bpf_ntohs(tcp->source), bpf_ntohs(tcp->dest));
		break;
	}
	case IPPROTO_UDP: {
		struct udphdr *udp = l4;
		if ((void *)(udp + 1) > end)
			return -1;
		CALI_LOG("udp %d -> %d", bpf_ntohs(udp->source), bpf_ntohs(udp->dest));
		break;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6: {
		struct { __u8 type; __u8 code; } *icmp = l4;
		(void)icmp;
		if ((void *)l4 + 4 > end)
			return -1;
		*icmp_type = icmp->type;
		CALI_LOG("icmp type %d code %d", icmp->type, icmp->code);
		break;
	}
	default:
		break;
	}
	return 0;
}

SEC("tc")
int cali_tc_main(struct __sk_buff *skb)
{
	__u8 proto = 0, icmp_type = 0;
	int rc = parse(skb, &proto, &icmp_type);

	if (rc > 0)
		return TC_ACT_OK;
	if (rc < 0) {
		CALI_LOG("malformed packet: drop");
		return TC_ACT_SHOT;
	}
	// IPv6 neighbour discovery and multicast listener messages skip policy (as
	// upstream's): the host stack (and its rules) handles them, never a direct
	// forward.
	if (proto == IPPROTO_ICMPV6) {
		switch (icmp_type) {
		case 130: // multicast listener query
		case 131: // ... report
		case 132: // ... done
		case 133: // router solicitation
		case 135: // neighbour solicitation
		case 136: // neighbour advertisement
			CALI_LOG("ICMPv6 type %d: no policy", icmp_type);
			skb->mark |= CALI_SKB_MARK_SEEN | CALI_SKB_MARK_SKIP_FIB;
			return TC_ACT_OK;
		}
	}
	__u32 hookif = skb->cb[CB_HOSTIF] ? skb->cb[CB_HOSTIF] : skb->ifindex;
	__u32 hflags = skb->cb[CB_FLAGS];
	if ((hflags & GLOBALS_F_WEP) && (hflags & GLOBALS_F_INGRESS) && !source_ok(skb, hookif)) {
		CALI_LOG("source not the workload's: drop");
		return TC_ACT_SHOT;
	}
	// Conntrack: a flow this hook's endpoint approved bypasses policy.
	struct ct_pkt ct;
	ct_parse(skb, &ct);
	if (ct.valid) {
		__u32 hostif = skb->cb[CB_HOSTIF] ? skb->cb[CB_HOSTIF] : skb->ifindex;
		enum ct_verdict v = ct_lookup(&ct, skb->cb[CB_FLAGS], hostif);
		CALI_LOG("conntrack verdict %d", v);
		if (v == CT_ESTABLISHED) {
			bpf_tail_call(skb, &cali_progs, PROG_PATH(PROG_INDEX_ALLOWED));
			return TC_ACT_SHOT;
		}
	}
	if (cali_state_fill(skb)) {
		CALI_LOG("no packet state: drop");
		return TC_ACT_SHOT;
	}
	// The caller's continuation for policy: this path's accepted / drop.
	skb->cb[CB_ALLOW] = PROG_PATH(PROG_INDEX_ALLOWED);
	skb->cb[CB_DENY] = PROG_PATH(PROG_INDEX_DROP);
	CALI_LOG("to policy slot %d", skb->cb[CB_POLICY]);
	bpf_tail_call(skb, &cali_jump, skb->cb[CB_POLICY]);
	CALI_LOG("no policy in slot %d: drop", skb->cb[CB_POLICY]);
	return TC_ACT_SHOT;
}

enum fwd_verdict {
	FWD_HOST,    // not a workload of ours: the host stack routes it
	FWD_REFUSED, // a workload that is not READY (the attach gap)
	FWD_DIRECT,  // a READY workload: forward straight to its device
};

// Whether a forward to ifindex may go straight there. A workload interface
// that is not READY for this IP version is refused.
static __always_inline enum fwd_verdict fwd_approve(__u32 ifindex, int v6)
{
	struct ifstate_val *st = bpf_map_lookup_elem(&cali_iface, &ifindex);

	if (!st || !(st->flags & IFACE_STATE_WEP))
		return FWD_HOST;
	if (st->flags & (v6 ? IFACE_STATE_V6_READY : IFACE_STATE_V4_READY))
		return FWD_DIRECT;
	return FWD_REFUSED;
}

SEC("tc")
int cali_tc_accepted(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup fib = {};
	__u32 flags = skb->cb[CB_FLAGS];
	int v6, rc;

	skb->mark |= CALI_SKB_MARK_SEEN;
	// Policy allowed it (or conntrack did): the hook endpoint's leg is approved.
	__u32 peer_ok = 0;
	if (!(flags & CB_F_NOTRACK)) {
		struct ct_pkt ct;
		ct_parse(skb, &ct);
		if (ct.valid)
			peer_ok = ct_approve(&ct, flags, skb->cb[CB_HOSTIF] ? skb->cb[CB_HOSTIF] : skb->ifindex);
	}
	// Only traffic leaving a workload (its TC ingress) is forwarded here.
	if (!(flags & GLOBALS_F_WEP) || !(flags & GLOBALS_F_INGRESS))
		return TC_ACT_OK;
	if ((void *)(eth + 1) > end)
		return TC_ACT_OK;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > end)
			return TC_ACT_OK;
		v6 = 0;
		fib.family = AF_INET;
		fib.tos = ip->tos;
		fib.l4_protocol = ip->protocol;
		fib.ipv4_src = ip->saddr;
		fib.ipv4_dst = ip->daddr;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		if ((void *)(ip6 + 1) > end)
			return TC_ACT_OK;
		v6 = 1;
		fib.family = AF_INET6;
		fib.l4_protocol = ip6->nexthdr;
		__builtin_memcpy(fib.ipv6_src, &ip6->saddr, sizeof(fib.ipv6_src));
		__builtin_memcpy(fib.ipv6_dst, &ip6->daddr, sizeof(fib.ipv6_dst));
	} else {
		return TC_ACT_OK;
	}
	// No tot_len: the helper then checks the skb itself against the egress
	// device's MTU, which lets GSO packets (larger than the MTU until they are
	// segmented) through; with tot_len set it compares that length and answers
	// FRAG_NEEDED for every GSO packet, sending bulk TCP the slow way.
	fib.ifindex = skb->cb[CB_HOSTIF] ? skb->cb[CB_HOSTIF] : skb->ifindex;
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	CALI_LOG("fib rc %d out ifindex %d", rc, fib.ifindex);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return TC_ACT_OK;
	switch (fwd_approve(fib.ifindex, v6)) {
	case FWD_HOST:
		return TC_ACT_OK;
	case FWD_REFUSED:
		// Refused: the host stack (and its attach-gap rules) decides.
		CALI_LOG("forward to ifindex %d refused", fib.ifindex);
		skb->mark |= CALI_SKB_MARK_SKIP_FIB;
		return TC_ACT_OK;
	case FWD_DIRECT:
		break;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return TC_ACT_OK;
	data = (void *)(long)skb->data;
	end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return TC_ACT_OK;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	// The receiving workload approved this flow on exactly this interface, and it
	// is past its opening SYN: straight into its namespace (its own program, which
	// would only bypass policy, is skipped). Otherwise its program must run.
	if (peer_ok && peer_ok == fib.ifindex) {
		CALI_LOG("redirect to the peer of ifindex %d", fib.ifindex);
		return bpf_redirect_peer(fib.ifindex, 0);
	}
	CALI_LOG("redirect to ifindex %d", fib.ifindex);
	return bpf_redirect(fib.ifindex, 0);
}

SEC("tc")
int cali_tc_drop(struct __sk_buff *skb)
{
	CALI_LOG("drop on ifindex %d", skb->ifindex);
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
