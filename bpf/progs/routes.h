// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// The routes map and the failsafe map, shared by main and the policy
// interpreter. Both are LPM tries pinned by name under felix's pin root
// (libbpf's pin_root_path): the Rust side creates and fills them first
// (bpf/src/routes.rs mirrors these layouts) and every object that includes
// this header reuses the pins. A layout change is a new map version.
//
// * cali_routes2: address prefix -> what it is (this host, a local
//   workload and its host-side ifindex, a remote workload block, a remote
//   host, an IP pool) from the calculation graph's routes and the local
//   workloads. Main checks a workload's source address against it (the
//   source must be one of that very workload's), and the host-endpoint
//   programs ask it whether an address is this host's.
// * cali_fsafes2: (direction, protocol, port, peer prefix) -> 1, the
//   configured failsafe ports (FailsafeInboundHostPorts /
//   FailsafeOutboundHostPorts): traffic to or from the host on them passes
//   a host endpoint whatever its policy says.

#ifndef FELIX_ROUTES_H
#define FELIX_ROUTES_H

#include "cali.h"

#define RT_LOCAL_HOST      0x01
#define RT_REMOTE_HOST     0x02
#define RT_LOCAL_WORKLOAD  0x04
#define RT_REMOTE_WORKLOAD 0x08
#define RT_IN_POOL         0x10
#define RT_NAT_OUT         0x20
#define RT_TUNNEL          0x40
// A prefix a local workload may use as its source without owning it
// (allowedSourcePrefixes / allowSpoofedSourcePrefixes): ifindex is that
// workload's.
#define RT_SPOOF_OK        0x80

struct cali_route_key {
	__u32 prefixlen; // 0..128 over addr
	__u8 addr[16];   // IPv4 as ::ffff:a.b.c.d (so an IPv4 prefix is 96 + len)
};

struct cali_route_val {
	__u32 flags;   // RT_*
	__u32 ifindex; // RT_LOCAL_WORKLOAD / RT_SPOOF_OK: the host-side device
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct cali_route_key);
	__type(value, struct cali_route_val);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cali_routes2 SEC(".maps");

#define FSAFE_IN  1 // to the host: the port is the destination, the net the source
#define FSAFE_OUT 2 // from the host: the port is the destination, the net the destination

struct cali_fsafe_key {
	__u32 prefixlen; // 32 (dir, proto, port) + the net's prefix over addr
	__u8 dir;        // FSAFE_*
	__u8 proto;
	__u16 port;      // network byte order (the trie compares bytes)
	__u8 addr[16];   // IPv4-mapped for IPv4
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct cali_fsafe_key);
	__type(value, __u32);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} cali_fsafes2 SEC(".maps");

// The route of a 16-byte address (NULL: none).
static __always_inline struct cali_route_val *route_of(const __u8 *addr)
{
	struct cali_route_key k = { .prefixlen = 128 };

	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(&cali_routes2, &k);
}

// Whether (dir, proto, port) with peer address `peer` is a failsafe.
static __always_inline int failsafe(__u8 dir, __u8 proto, __u16 port_host_order, const __u8 *peer)
{
	struct cali_fsafe_key k = { .prefixlen = 32 + 128, .dir = dir, .proto = proto };

	k.port = bpf_htons(port_host_order);
	__builtin_memcpy(k.addr, peer, 16);
	return bpf_map_lookup_elem(&cali_fsafes2, &k) != NULL;
}

#endif
