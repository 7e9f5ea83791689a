// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// The per-interface preamble: the only program attached to a hook. It is
// loaded once per interface and direction with that interface's globals in
// .rodata, stores them in skb->cb for the rest of the chain and tail-calls
// the log filter (if any) or the generic main program. Any failed tail call
// drops: a missing chain must never pass traffic.

#include "cali.h"

const volatile struct cali_tc_globals cali_globals = {
	.policy_slot = CALI_SLOT_NONE,
	.log_filter_slot = CALI_SLOT_NONE,
	.jump_main = PROG_INDEX_MAIN,
	.jump_main_debug = PROG_INDEX_MAIN + PROG_DEBUG_OFFSET,
};

SEC("tc")
int cali_tc_preamble(struct __sk_buff *skb)
{
	skb->cb[CB_POLICY] = cali_globals.policy_slot;
	skb->cb[CB_FLAGS] = cali_globals.flags;
	skb->cb[CB_HOSTIF] = cali_globals.host_ifindex;

	if (cali_globals.log_filter_slot != CALI_SLOT_NONE) {
		// The filter continues at cb[0] (fast) or cb[1] (debug).
		skb->cb[CB_ALLOW] = cali_globals.jump_main;
		skb->cb[CB_DENY] = cali_globals.jump_main_debug;
		bpf_tail_call(skb, &cali_jump, cali_globals.log_filter_slot);
		// No filter in the slot: fall back to the fast path.
	}
	skb->cb[CB_ALLOW] = CALI_SLOT_NONE;
	skb->cb[CB_DENY] = CALI_SLOT_NONE;
	bpf_tail_call(skb, &cali_progs, cali_globals.jump_main);
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
