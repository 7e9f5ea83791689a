// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// felix-rs TC programs: what every program of the chain shares. The numbers
// here are mirrored by bpf/src/layout.rs; a change to either side is a change
// to both (and, for a map's layout, a new map version).

#ifndef FELIX_CALI_H
#define FELIX_CALI_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef CALI_DEBUG
#define CALI_DEBUG 0
#endif

// Generic programs map (per attach mechanism and TC direction): the slot of
// each generic program. Debug variants sit at the same slot plus
// PROG_DEBUG_OFFSET. Slot 1 is the policy's index in the per-endpoint
// map's numbering and is never filled here (one policy slot per endpoint
// serves both paths; the continuation in cb[0]/cb[1] picks the path).
#define PROG_INDEX_MAIN      0
#define PROG_INDEX_POLICY    1
#define PROG_INDEX_ALLOWED   2
#define PROG_INDEX_ICMP      3
#define PROG_INDEX_DROP      4
#define PROG_DEBUG_OFFSET    10
#define PROG_GENERIC_SLOTS   20

#if CALI_DEBUG
#define PROG_PATH(idx) ((idx) + PROG_DEBUG_OFFSET)
#define CALI_LOG(fmt, ...) bpf_printk("cali " fmt, ##__VA_ARGS__)
#else
#define PROG_PATH(idx) (idx)
#define CALI_LOG(fmt, ...) do { } while (0)
#endif

// No slot (policy or log filter).
#define CALI_SLOT_NONE 0xffffffffu

// skb->cb[] while a packet walks the chain.
#define CB_ALLOW   0 // where policy continues on allow (generic map slot)
#define CB_DENY    1 // where policy continues on deny (generic map slot)
#define CB_POLICY  2 // the endpoint's policy slot in the per-endpoint map
#define CB_FLAGS   3 // the interface's GLOBALS_F_* flags
#define CB_HOSTIF  4 // host-side ifindex (0: use skb->ifindex)

// Per-interface flags baked into the preamble's globals.
#define GLOBALS_F_WEP     0x1  // a workload interface
#define GLOBALS_F_HEP     0x2  // a host endpoint
#define GLOBALS_F_INGRESS 0x4  // attached at TC ingress (else TC egress)
// Set in cb[CB_FLAGS] by the chain itself (never a global): untracked policy
// allowed the packet, so accepted creates and approves no conntrack entry.
#define CB_F_NOTRACK      0x100

// skb->mark bits (felix's mark space).
#define CALI_SKB_MARK_SEEN     0x01000000u // accepted by the chain
#define CALI_SKB_MARK_SKIP_FIB 0x00100000u // forward refused: host stack decides

// The per-interface globals the preamble is loaded with (.rodata).
struct cali_tc_globals {
	__u32 host_ifindex;
	__u32 flags;
	__u32 policy_slot;
	__u32 log_filter_slot;
	__u32 jump_main;
	__u32 jump_main_debug;
};

// cali_iface (version 4 layout): ifindex -> interface state.
struct ifstate_val {
	__u32 flags;
	char name[16];
	__s32 xdp_policy_v4;
	__s32 ingress_policy_v4;
	__s32 egress_policy_v4;
	__s32 xdp_policy_v6;
	__s32 ingress_policy_v6;
	__s32 egress_policy_v6;
	__s32 tc_filter_ingress;
	__s32 tc_filter_egress;
};

#define IFACE_STATE_WEP         0x1
#define IFACE_STATE_V4_READY    0x2
#define IFACE_STATE_V6_READY    0x4
#define IFACE_STATE_HEP         0x8
#define IFACE_STATE_NOT_MANAGED 0x400

// The maps every object references. The loader replaces each with the
// pinned map of the attach mechanism and direction being loaded (reuse by
// fd), so these definitions only need to match the pinned maps' shape.
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, PROG_GENERIC_SLOTS);
} cali_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 16384);
} cali_jump SEC(".maps");

#endif
