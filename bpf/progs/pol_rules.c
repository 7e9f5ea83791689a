// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// The policy interpreter: one compiled program for every endpoint. It reads
// the packet facts main stashed (state.h), finds the endpoint's policy list
// by (policy slot, policy direction), and walks it with bpf_loop, one record
// per iteration:
//
//   endpoint list (cali_pol_ops2[ep.base ..]):  REF(policy or profile
//   handle, pass target) ... TIER_END(default action) ... END
//   policy/profile stream (cali_pol_ops2[idx.base[fam] ..]): test records,
//   each with a target on match (t) and on miss (f): another record of the
//   same stream (relative index) or a terminal (T_ALLOW, T_DENY, T_PASS,
//   T_NEXT = no rule of this policy decided).
//
// A policy is reached through one cali_pol_idx2 entry (hash: an update swaps
// the value atomically for readers), so a policy change is new records
// elsewhere plus one swap; an endpoint's list likewise. It ends like
// cali_pol_allow/deny: tail call cb[0] on allow, cb[1] on deny, and drops if
// that fails. Every missing record fails closed (deny). Built twice; the
// debug build logs each decision.
//
// Drop reports (DropAttributionEnabled): a denied packet's walk remembers
// what denied it (a deny rule: policy handle + record of its stream; a
// tier's end or the list's end: endpoint-list record; a policy or list not
// written: fail closed) and, when cali_drop_cfg enables it, one event per
// packet goes to the cali_drops ring buffer, at most cali_drop_cfg.per_sec
// per second per (hashed) rule so a flood costs bounded CPU; counts of
// reported, suppressed and lost (ring full) events are kept per CPU.
//
// The layouts are mirrored by bpf/src/layout.rs (policy records) and
// bpf/src/drops.rs (drop reports).

#include "cali.h"
#include "routes.h"
#include "state.h"

// Record codes.
#define OP_TRUE     0  // always matches (a rule with no match criteria)
#define OP_PROTO    1  // arg: protocol number
#define OP_NET_SRC  2  // data: 16-byte address, arg: prefix length (0..128)
#define OP_NET_DST  3
#define OP_PORT_SRC 4  // lo..hi inclusive; no ports: no match
#define OP_PORT_DST 5
#define OP_SET_SRC  6  // data[0..8]: set id; (addr, proto, port) in the set
#define OP_SET_DST  7
#define OP_ICMP     8  // lo: type, hi: code or ICMP_ANY_CODE; not ICMP: no match
#define OP_LOG      9  // counts a log hit for the policy, always matches
#define OP_EP_REF      16 // endpoint list: data[0..4] handle, t: list index on Pass
#define OP_EP_TIER_END 17 // endpoint list: arg = ACT_PASS continues, else deny
#define OP_EP_END      18 // endpoint list: arg EP_END_DENY (default deny) or EP_END_NO_MATCH

#define ICMP_ANY_CODE 0xffff
#define ACT_DENY 0
#define ACT_PASS 1

// Terminal targets.
#define T_ALLOW 0xfffffff0u
#define T_DENY  0xfffffff1u
#define T_PASS  0xfffffff2u
#define T_NEXT  0xfffffff3u
#define T_FIRST T_ALLOW

#define EP_END_DENY     0
#define EP_END_NO_MATCH 1 // the list decided nothing: the next stage decides

// Endpoint-list directions (cali_ep_key.dir). Workloads have the first two;
// a host endpoint has all seven, its hook walking them in stages (see
// hep_policy below).
#define POL_DIR_INGRESS       0 // normal policy, to the endpoint
#define POL_DIR_EGRESS        1 // normal policy, from the endpoint
#define POL_DIR_UNTRACKED_IN  2
#define POL_DIR_UNTRACKED_OUT 3
#define POL_DIR_PREDNAT_IN    4
#define POL_DIR_FORWARD_IN    5 // applyOnForward policy, forwarded in through it
#define POL_DIR_FORWARD_OUT   6 // ... forwarded out through it

// Most loop iterations one packet may take before the walk fails closed (each
// walks up to INNER_STEPS records of a policy, or one endpoint-list record).
#define MAX_STEPS (1u << 20)
#define INNER_STEPS 8

#define POL_OPS_SIZE  (1u << 18)
#define POL_IDX_SIZE  65536
#define POL_EP_SIZE   65536
#define IPSETS_SIZE   (1u << 20)
#define LOG_SLOTS     65536

struct cali_op {
	__u8 code;
	__u8 arg;
	__u16 lo;
	__u16 hi;
	__u16 pre; // 0, or protocol + 1: the test misses unless the packet has it
	__u32 t;
	__u32 f;
	__u8 data[16];
};

struct cali_pol_idx {
	__u32 base[2]; // [0] IPv4 stream, [1] IPv6 stream
	__u32 len[2];
};

struct cali_ep_key {
	__u32 slot; // the endpoint's policy slot (cb[CB_POLICY])
	__u32 dir;  // POL_DIR_*
};

struct cali_ep_val {
	__u32 base;
	__u32 len;
};

struct cali_ipset_key {
	__u32 prefixlen; // bits after this field that must match
	__u8 set_id[8];  // big endian
	__u8 addr[16];   // IPv4-mapped for IPv4
	__u16 port;      // host order; 0 for CIDR members
	__u8 proto;      // 0 for CIDR members
	__u8 pad;
};

#define IPSET_FULL_PREFIX (64 + 128 + 16 + 8)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct cali_op);
	__uint(max_entries, POL_OPS_SIZE);
} cali_pol_ops2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct cali_pol_idx);
	__uint(max_entries, POL_IDX_SIZE);
} cali_pol_idx2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct cali_ep_key);
	__type(value, struct cali_ep_val);
	__uint(max_entries, POL_EP_SIZE);
} cali_pol_ep2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct cali_ipset_key);
	__type(value, __u32);
	__uint(max_entries, IPSETS_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} cali_ipsets2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LOG_SLOTS);
} cali_pol_log2 SEC(".maps");

// Drop reports.
#define DROP_RL_SLOTS 1024 // rate-limit buckets (rule hash % slots)
#define DROP_RING_SIZE (256 * 1024)

#define WHY_NONE     0
#define WHY_RULE     1 // handle's deny rule; index: record of its stream
#define WHY_TIER_END 2 // index: the endpoint list's TIER_END record
#define WHY_LIST_END 3 // index: the endpoint list's END record
#define WHY_MISSING  4 // handle's policy (or, handle 0, the list) not written
#define WHY_BROKEN   5 // a record missing or the step budget spent

#define DROP_STAT_REPORTED   0
#define DROP_STAT_SUPPRESSED 1
#define DROP_STAT_LOST       2

struct cali_drop_cfg {
	__u32 enabled;
	__u32 per_sec; // reports per second per rule bucket
};

struct cali_drop_rl {
	__u64 window_ns; // start of the current second
	__u32 count;     // reports in it
	__u32 pad;
};

struct cali_drop_event {
	__u64 ts_ns;   // bpf_ktime_get_ns
	__u32 ifindex; // the hook's interface
	__u32 hook;    // globals flags of the hook (GLOBALS_F_*)
	__u32 slot;    // policy slot
	__u32 list;    // POL_DIR_* of the list that denied
	__u32 why;     // WHY_*
	__u32 handle;  // policy handle (WHY_RULE, WHY_MISSING)
	__u32 index;   // record index (stream for WHY_RULE, list otherwise)
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 ip_ver;
	__u8 proto;
	__u8 icmp_type;
	__u8 icmp_code;
	__u32 st_flags; // CALI_ST_*
};

// What denied a walk (filled on a deny or no-match verdict).
struct drop_why {
	__u32 why;
	__u32 list;
	__u32 handle;
	__u32 index;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, DROP_RING_SIZE);
} cali_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct cali_drop_cfg);
	__uint(max_entries, 1);
} cali_drop_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct cali_drop_rl);
	__uint(max_entries, DROP_RL_SLOTS);
} cali_drop_rl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 3);
} cali_drop_stats SEC(".maps");

// Per-CPU scratch of the current packet's `why` (map memory, not the stack:
// the verifier does not track its values, so the deny paths do not multiply
// the states it explores). Written by the walks, read by report_drop, in one
// program run on one CPU.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct drop_why);
	__uint(max_entries, 1);
} cali_drop_why SEC(".maps");

#define V_NONE     -1
#define V_ALLOW    0
#define V_DENY     1
#define V_NO_MATCH 2

struct walk {
	struct cali_state *st;
	__u32 fam;
	__u32 ep_base, ep_len, ep_cur;
	__u32 in_pol;
	__u32 pol_handle, pol_base, pol_len, pol_cur;
	__u32 pass_target;
	__u32 steps;
	int verdict;
	// Map memory (cali_drop_why), so that what the walk records adds no
	// verifier state.
	struct drop_why *why;
};

static __always_inline void why_set(struct walk *w, __u32 why, __u32 handle, __u32 index)
{
	w->why->why = why;
	w->why->handle = handle;
	w->why->index = index;
}

static __always_inline int prefix_match(const __u8 *a, const __u8 *b, __u32 plen)
{
	const __u32 *x = (const __u32 *)a;
	const __u32 *y = (const __u32 *)b;
	int i;

#pragma unroll
	for (i = 0; i < 4; i++) {
		__u32 bits, mask;

		if (plen <= (__u32)i * 32)
			break;
		bits = plen - i * 32;
		mask = bits >= 32 ? 0xffffffffu : bpf_htonl(~0u << (32 - bits));
		if ((x[i] ^ y[i]) & mask)
			return 0;
	}
	return 1;
}

static __always_inline int set_member(struct cali_state *st, const struct cali_op *op, int dst)
{
	struct cali_ipset_key k = {};

	k.prefixlen = IPSET_FULL_PREFIX;
	__builtin_memcpy(k.set_id, op->data, 8);
	if (dst) {
		__builtin_memcpy(k.addr, st->dst, 16);
		k.port = st->dport;
	} else {
		__builtin_memcpy(k.addr, st->src, 16);
		k.port = st->sport;
	}
	k.proto = st->proto;
	return bpf_map_lookup_elem(&cali_ipsets2, &k) != NULL;
}

static __always_inline int eval(struct walk *w, const struct cali_op *op)
{
	struct cali_state *st = w->st;

	switch (op->code) {
	case OP_TRUE:
		return 1;
	case OP_PROTO:
		return st->proto == op->arg;
	case OP_NET_SRC:
		return prefix_match(st->src, op->data, op->arg);
	case OP_NET_DST:
		return prefix_match(st->dst, op->data, op->arg);
	case OP_PORT_SRC:
		return (st->flags & CALI_ST_PORTS) && st->sport >= op->lo && st->sport <= op->hi;
	case OP_PORT_DST:
		return (st->flags & CALI_ST_PORTS) && st->dport >= op->lo && st->dport <= op->hi;
	case OP_SET_SRC:
		return set_member(st, op, 0);
	case OP_SET_DST:
		return set_member(st, op, 1);
	case OP_ICMP:
		return (st->flags & CALI_ST_ICMP) && st->icmp_type == op->lo &&
		       (op->hi == ICMP_ANY_CODE || st->icmp_code == op->hi);
	case OP_LOG: {
		__u32 slot = w->pol_handle % LOG_SLOTS;
		__u64 *n = bpf_map_lookup_elem(&cali_pol_log2, &slot);
		if (n)
			*n += 1;
		CALI_LOG("policy %d: log rule matched", w->pol_handle);
		return 1;
	}
	default:
		return 0; // unknown test: no match (fails closed at the policy's end)
	}
}

// The policy (or profile) being walked decided `t` (a terminal target).
static __always_inline void policy_done(struct walk *w, __u32 t)
{
	w->in_pol = 0;
	switch (t) {
	case T_ALLOW:
		w->verdict = V_ALLOW;
		break;
	case T_PASS:
		w->ep_cur = w->pass_target;
		break;
	case T_NEXT:
		w->ep_cur++;
		break;
	default:
		why_set(w, WHY_RULE, w->pol_handle, w->pol_cur);
		w->verdict = V_DENY;
		break;
	}
	CALI_LOG("policy %d: target %x", w->pol_handle, t);
}

static long step(__u32 i, void *ctx)
{
	struct walk *w = ctx;
	struct cali_op *op;
	__u32 idx;

#if CALI_DEBUG
	w->steps++;
#endif
	if (w->in_pol) {
		// Up to INNER_STEPS records of the policy per loop iteration: fewer callback
		// round trips per record.
		__u32 cur = w->pol_cur;
		int k;

		for (k = 0; k < INNER_STEPS; k++) {
			__u32 next;

			if (cur >= w->pol_len) {
				policy_done(w, T_NEXT);
				return 0;
			}
			idx = w->pol_base + cur;
			op = bpf_map_lookup_elem(&cali_pol_ops2, &idx);
			if (!op) {
				why_set(w, WHY_BROKEN, w->pol_handle, cur);
				w->verdict = V_DENY;
				return 1;
			}
			if (op->pre && op->pre != (__u16)w->st->proto + 1)
				next = op->f;
			else
				next = eval(w, op) ? op->t : op->f;
			if (next >= T_FIRST) {
				w->pol_cur = cur; // the deciding record (a deny names it)
				policy_done(w, next);
				return w->verdict != V_NONE;
			}
			cur = next;
		}
		w->pol_cur = cur;
		return 0;
	}
	if (w->ep_cur >= w->ep_len) {
		why_set(w, WHY_BROKEN, 0, w->ep_cur);
		w->verdict = V_DENY;
		return 1;
	}
	idx = w->ep_base + w->ep_cur;
	op = bpf_map_lookup_elem(&cali_pol_ops2, &idx);
	if (!op) {
		why_set(w, WHY_BROKEN, 0, w->ep_cur);
		w->verdict = V_DENY;
		return 1;
	}
	switch (op->code) {
	case OP_EP_REF: {
		__u32 handle;
		struct cali_pol_idx *p;

		__builtin_memcpy(&handle, op->data, 4);
		p = bpf_map_lookup_elem(&cali_pol_idx2, &handle);
		if (!p) {
			CALI_LOG("policy %d missing: deny", handle);
			why_set(w, WHY_MISSING, handle, w->ep_cur);
			w->verdict = V_DENY;
			return 1;
		}
		w->pol_handle = handle;
		w->pass_target = op->t;
		w->pol_cur = 0;
		if (w->fam) {
			w->pol_base = p->base[1];
			w->pol_len = p->len[1];
		} else {
			w->pol_base = p->base[0];
			w->pol_len = p->len[0];
		}
		w->in_pol = 1;
		return 0;
	}
	case OP_EP_TIER_END:
		if (op->arg == ACT_PASS) {
			w->ep_cur++;
			return 0;
		}
		CALI_LOG("end of tier: deny");
		why_set(w, WHY_TIER_END, 0, w->ep_cur);
		w->verdict = V_DENY;
		return 1;
	default:
		why_set(w, op->code == OP_EP_END ? WHY_LIST_END : WHY_BROKEN, 0, w->ep_cur);
		if (op->code == OP_EP_END && op->arg == EP_END_NO_MATCH) {
			CALI_LOG("end of endpoint list: no match");
			w->verdict = V_NO_MATCH;
			return 1;
		}
		CALI_LOG("end of endpoint list: deny");
		w->verdict = V_DENY;
		return 1;
	}
}

// Walks the list of (slot, dir): V_ALLOW, V_DENY or V_NO_MATCH. A missing
// list denies (fail closed: the driver writes every list of a hook before
// the hook can run). On a deny or no match, `why` says what decided.
// Global (not static): the verifier checks a global function once, on its own, instead of
// at each of its five call sites with the caller's state; inlined, the interpreter passed a
// million processed instructions on a 6.18 stable kernel and was refused.
__noinline int walk_list(struct cali_state *st, __u32 slot, __u32 dir, struct drop_why *why)
{
	struct cali_ep_key key = { .slot = slot, .dir = dir };
	struct cali_ep_val *ep = bpf_map_lookup_elem(&cali_pol_ep2, &key);
	struct walk w = {};

	if (!st || !why) // never, but a global function's verifier does not know
		return V_DENY;
	why->list = dir;
	if (!ep) {
		CALI_LOG("no policy list for slot %d dir %d: deny", slot, dir);
		why->why = WHY_MISSING;
		why->handle = 0;
		why->index = 0;
		return V_DENY;
	}
	w.st = st;
	w.fam = st->ip_ver == 6;
	w.ep_base = ep->base;
	w.ep_len = ep->len;
	w.verdict = V_NONE;
	w.why = why;
	bpf_loop(MAX_STEPS, step, &w, 0);
	CALI_LOG("policy walk of dir %d: verdict %d after %d steps", dir, w.verdict, w.steps);
	if (w.verdict == V_ALLOW)
		return V_ALLOW;
	if (w.verdict == V_NONE)
		why_set(&w, WHY_BROKEN, 0, w.ep_cur);
	return w.verdict == V_NO_MATCH ? V_NO_MATCH : V_DENY;
}

#define AF_INET 2
#define AF_INET6 10

// Whether `addr` is one of this host's addresses: the routes map says so (an
// entry without RT_LOCAL_HOST says it is not), or, for an address the map does
// not know (e.g. a second interface's), the kernel's FIB does not forward it.
static __always_inline int host_addr(struct __sk_buff *skb, const struct cali_state *st, const __u8 *addr)
{
	struct cali_route_val *r = route_of(addr);
	struct bpf_fib_lookup fib = {};

	if (r)
		return !!(r->flags & RT_LOCAL_HOST);
	fib.ifindex = skb->ifindex;
	if (st->ip_ver == 6) {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_dst, addr, 16);
	} else {
		fib.family = AF_INET;
		__builtin_memcpy(&fib.ipv4_dst, addr + 12, 4);
	}
	// NOT_FWDED: a local, broadcast or multicast address, or no route (the host
	// stack drops it); FWD_DISABLED: the interface does not forward, so what
	// crosses it is the host's own.
	switch (bpf_fib_lookup(skb, &fib, sizeof(fib), 0)) {
	case BPF_FIB_LKUP_RET_NOT_FWDED:
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return 1;
	default:
		return 0;
	}
}

// A host endpoint's hook, as the iptables renderer's chains order it:
//   failsafe ports (to or from the host: allowed; forwarded: skip to the
//   forward stage) -> untracked policy (allow: accepted and not tracked) ->
//   pre-DNAT policy (ingress only; allow: accepted) -> normal policy for
//   traffic to or from the host itself (default deny), applyOnForward policy
//   for traffic forwarded through the interface (no match: allowed).
static __always_inline int hep_policy(struct __sk_buff *skb, struct cali_state *st, __u32 flags, __u32 slot,
				      struct drop_why *why)
{
	int ingress = !!(flags & GLOBALS_F_INGRESS);
	// Ingress: what arrives for the host or to be forwarded; egress: what the
	// host sends or forwards.
	int host = host_addr(skb, st, ingress ? st->dst : st->src);
	int fsafe = (st->flags & CALI_ST_PORTS) &&
		    failsafe(ingress ? FSAFE_IN : FSAFE_OUT, st->proto, st->dport,
			     ingress ? st->src : st->dst);
	int v;

	CALI_LOG("host endpoint: host %d failsafe %d", host, fsafe);
	if (fsafe && host)
		return V_ALLOW;
	if (!fsafe) {
		v = walk_list(st, slot, ingress ? POL_DIR_UNTRACKED_IN : POL_DIR_UNTRACKED_OUT, why);
		if (v == V_ALLOW) {
			skb->cb[CB_FLAGS] |= CB_F_NOTRACK;
			return V_ALLOW;
		}
		if (v == V_DENY)
			return V_DENY;
		if (ingress) {
			v = walk_list(st, slot, POL_DIR_PREDNAT_IN, why);
			if (v != V_NO_MATCH)
				return v;
		}
	}
	if (host)
		v = walk_list(st, slot, ingress ? POL_DIR_INGRESS : POL_DIR_EGRESS, why);
	else
		v = walk_list(st, slot, ingress ? POL_DIR_FORWARD_IN : POL_DIR_FORWARD_OUT, why);
	return v == V_DENY ? V_DENY : V_ALLOW;
}

static __always_inline void drop_stat(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&cali_drop_stats, &which);

	if (n)
		*n += 1;
}

// Reports a denied packet when drop reports are on, within the rate limit of
// its rule's bucket (shared by every CPU: a race between the check and the
// add, or a racing window reset, only lets a few more through).
static __always_inline void report_drop(struct __sk_buff *skb, const struct cali_state *st,
					__u32 flags, __u32 slot, const struct drop_why *why)
{
	__u32 zero = 0;
	struct cali_drop_cfg *cfg = bpf_map_lookup_elem(&cali_drop_cfg, &zero);
	struct cali_drop_event *e;
	struct cali_drop_rl *rl;
	__u32 bucket;
	__u64 now;

	if (!cfg || !cfg->enabled || why->why == WHY_NONE)
		return;
	bucket = (why->handle * 2654435761u ^ why->index * 40503u ^ why->list << 3 ^ why->why) %
		 DROP_RL_SLOTS;
	rl = bpf_map_lookup_elem(&cali_drop_rl, &bucket);
	if (!rl)
		return;
	now = bpf_ktime_get_ns();
	if (now - rl->window_ns >= 1000000000ull) {
		rl->window_ns = now;
		rl->count = 0;
	}
	if (rl->count >= cfg->per_sec) {
		drop_stat(DROP_STAT_SUPPRESSED);
		return;
	}
	__sync_fetch_and_add(&rl->count, 1);
	e = bpf_ringbuf_reserve(&cali_drops, sizeof(*e), 0);
	if (!e) {
		drop_stat(DROP_STAT_LOST);
		return;
	}
	e->ts_ns = now;
	e->ifindex = skb->ifindex;
	e->hook = flags;
	e->slot = slot;
	e->list = why->list;
	e->why = why->why;
	e->handle = why->handle;
	e->index = why->index;
	__builtin_memcpy(e->src, st->src, 16);
	__builtin_memcpy(e->dst, st->dst, 16);
	e->sport = st->sport;
	e->dport = st->dport;
	e->ip_ver = st->ip_ver;
	e->proto = st->proto;
	e->icmp_type = st->icmp_type;
	e->icmp_code = st->icmp_code;
	e->st_flags = st->flags;
	bpf_ringbuf_submit(e, 0);
	drop_stat(DROP_STAT_REPORTED);
}

SEC("tc")
int cali_pol_rules(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u32 flags = skb->cb[CB_FLAGS];
	__u32 slot = skb->cb[CB_POLICY];
	struct cali_state *st = bpf_map_lookup_elem(&cali_state2, &zero);
	struct drop_why *why = bpf_map_lookup_elem(&cali_drop_why, &zero);
	int v;

	if (!st || !why)
		goto deny;
	why->why = WHY_NONE;
	if (flags & GLOBALS_F_HEP) {
		v = hep_policy(skb, st, flags, slot, why);
	} else {
		// A workload's host-side TC ingress carries what the workload sends: its
		// egress policy.
		v = walk_list(st, slot, (flags & GLOBALS_F_INGRESS) ? POL_DIR_EGRESS : POL_DIR_INGRESS,
			      why);
		// A workload's lists end in a default deny; "no match" is no allow.
		if (v == V_NO_MATCH)
			v = V_DENY;
	}
	if (v == V_ALLOW) {
		bpf_tail_call(skb, &cali_progs, skb->cb[CB_ALLOW]);
		return TC_ACT_SHOT;
	}
	report_drop(skb, st, flags, slot, why);
deny:
	bpf_tail_call(skb, &cali_progs, skb->cb[CB_DENY]);
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
