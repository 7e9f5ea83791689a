// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
//
// Per-endpoint programs: the default allow and default deny policies and the
// match-all log filter. A policy continues at the generic slot its caller
// wrote into cb[0] (allow) or cb[1] (deny), so one policy program in an
// endpoint's slot serves the fast and the debug path alike. Built twice; the
// debug build logs its verdict.

#include "cali.h"

SEC("tc")
int cali_pol_allow(struct __sk_buff *skb)
{
	CALI_LOG("policy: allow, continue at %d", skb->cb[CB_ALLOW]);
	bpf_tail_call(skb, &cali_progs, skb->cb[CB_ALLOW]);
	return TC_ACT_SHOT;
}

SEC("tc")
int cali_pol_deny(struct __sk_buff *skb)
{
	CALI_LOG("policy: deny, continue at %d", skb->cb[CB_DENY]);
	bpf_tail_call(skb, &cali_progs, skb->cb[CB_DENY]);
	return TC_ACT_SHOT;
}

// The match-all log filter: every packet takes the debug path (cb[1]).
SEC("tc")
int cali_log_all(struct __sk_buff *skb)
{
	bpf_tail_call(skb, &cali_progs, skb->cb[CB_DENY]);
	// No debug main: try the fast path.
	bpf_tail_call(skb, &cali_progs, skb->cb[CB_ALLOW]);
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
