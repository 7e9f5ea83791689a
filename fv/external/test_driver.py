#!/usr/bin/python3
"""Test dataplane driver for felix-rs's external-dataplane mode.

Felix starts this script as a child with no arguments, the way upstream Felix
starts the VPP driver.  Felix writes `ToDataplane` messages to our fd 3 and
reads `FromDataplane` messages from our fd 4.  Each frame on the wire is an
8-byte little-endian unsigned length followed by that many bytes of protobuf.
The bindings are generated at start-up with protoc from felixbackend.proto.

Checks (violations are recorded in the report, never fatal):
  * sequence numbers: each must be the previous one plus one (seqErrors);
  * the first message must be a ConfigUpdate; InSync must arrive exactly once;
  * flush order (orderErrors): an IP set must be defined (IPSetUpdate) before
    a delta or an active policy/profile rule uses it, and not removed while a
    policy/profile uses it; a policy/profile must be active before an endpoint
    (any TierInfo list, profile_ids) refers to it, and not removed while one
    does.
Replies: on InSync a ProcessStatusUpdate and a DataplaneInSync; then a
ProcessStatusUpdate every 2 s; an "up" status for every endpoint update and a
status removal for every endpoint removal.

Exit codes: 0 at EOF between frames (or SIGTERM), 1 on malformed input,
2 if set-up fails, 3 in `exit` mode.

Environment:
  FELIX_TEST_DRIVER_PROTO   felixbackend.proto (default ../../proto/ from here)
  FELIX_TEST_DRIVER_REPORT  JSON report path, rewritten atomically (optional)
  FELIX_TEST_DRIVER_MODE    normal (default) | garbage (send an undecodable
                            frame after InSync) | exit (exit 3 after InSync) |
                            slow (sleep 0.2 s after each message)

Report keys: messages, firstSeq, lastSeq, firstType, inSyncAt, inSyncCount,
afterInSync, seqErrors, orderErrors, types, activePolicies ("tier/name", plus
";field=value" for other non-empty PolicyID fields, e.g.
"default/p1;kind=GlobalNetworkPolicy"), activeProfiles, ipSets,
workloadEndpoints ("orchestrator/workload/endpoint"), hostEndpoints, error,
repliesSent, mode.
"""
import datetime, importlib, json, os, shutil, signal, struct, subprocess, sys
import tempfile, threading, time

MAX_FRAME = 256 << 20      # frames longer than this are treated as garbage
REPORT_INTERVAL = 0.1      # minimum seconds between throttled report writes
STATUS_INTERVAL = 2.0      # seconds between periodic ProcessStatusUpdates
MODES = ("normal", "garbage", "exit", "slow")
ENDPOINT_KINDS = ("workload_endpoint_update", "workload_endpoint_remove",
                  "host_endpoint_update", "host_endpoint_remove")
START = time.monotonic()


def log(msg):
    print("test-driver: " + msg, file=sys.stderr, flush=True)


def load_bindings():
    """Run protoc on the proto file into a temp dir and import the module."""
    here = os.path.dirname(os.path.realpath(__file__))
    proto = os.path.abspath(os.environ.get("FELIX_TEST_DRIVER_PROTO") or
                            os.path.join(here, "..", "..", "proto", "felixbackend.proto"))
    tmp = tempfile.mkdtemp(prefix="felix-test-driver-")
    try:
        cmd = ["protoc", "--python_out=" + tmp, "-I", os.path.dirname(proto),
               os.path.basename(proto)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            log("cannot run protoc: %s" % e)
            sys.exit(2)
        if res.returncode != 0:
            log("protoc failed on %s (exit %d): %s"
                % (proto, res.returncode, res.stderr.strip()))
            sys.exit(2)
        sys.path.insert(0, tmp)
        name = os.path.splitext(os.path.basename(proto))[0] + "_pb2"
        try:
            return importlib.import_module(name)
        except Exception as e:  # version mismatch, syntax error, ...
            log("cannot import bindings %s generated from %s: %s" % (name, proto, e))
            sys.exit(2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Driver:
    def __init__(self, pb, mode, report_path):
        self.pb, self.mode, self.report_path = pb, mode, report_path
        self.mu = threading.RLock()       # guards the checker state below
        self.out_mu = threading.Lock()    # guards writes to fd 4
        self.stop = threading.Event()
        # Counters and findings.
        self.messages = 0
        self.first_seq = self.last_seq = self.first_type = self.in_sync_at = None
        self.in_sync_count = self.after_in_sync = 0
        self.seq_errors, self.order_errors, self.types = [], [], {}
        self.error = None
        # Currently defined objects, with what each one references.
        self.ipsets = set()
        self.policies = {}   # PolicyID key -> (tier, label, {ip set ids})
        self.profiles = {}   # profile name -> {ip set ids}
        self.weps = {}       # id string -> ({policy keys}, {profile names})
        self.heps = {}       # id string -> ({policy keys}, {profile names})
        # Replies and report bookkeeping.
        self.reply_seq = self.replies_sent = 0
        self.last_status = self.last_report = 0.0
        self.out_broken, self.dirty = False, True
        # Rule fields holding IP set ids: src_ip_set_ids, dst_ip_port_set_ids...
        from google.protobuf.descriptor import FieldDescriptor as FD
        self.set_fields = [f.name for f in pb.Rule.DESCRIPTOR.fields
                           if f.label == FD.LABEL_REPEATED and f.type == FD.TYPE_STRING
                           and f.name.endswith("_set_ids")]

    # ---- replies (fd 4) ----

    def write_raw(self, data):
        if self.out_broken:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(4, view):]
        except OSError as e:
            self.out_broken = True
            log("cannot write to fd 4 (%s); no more replies" % e)

    def send(self, **payload):
        reply = self.pb.FromDataplane(**payload)
        with self.out_mu:
            self.reply_seq += 1
            reply.sequence_number = self.reply_seq
            data = reply.SerializeToString()
            self.write_raw(struct.pack("<Q", len(data)) + data)
            self.replies_sent += 1

    def send_status(self):
        self.last_status = time.monotonic()
        now = datetime.datetime.now(datetime.timezone.utc)
        self.send(process_status_update=self.pb.ProcessStatusUpdate(
            iso_timestamp=now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            uptime=time.monotonic() - START))

    def background(self):
        """Flush a pending report and send periodic status after InSync."""
        while not self.stop.wait(REPORT_INTERVAL):
            with self.mu:
                if self.dirty and not self.stop.is_set():
                    self.write_report(force=True)
            if self.in_sync_at is not None and \
                    time.monotonic() - self.last_status >= STATUS_INTERVAL:
                self.send_status()

    # ---- report ----

    def write_report(self, force=False):
        now = time.monotonic()
        if not self.report_path or (not force and now - self.last_report < REPORT_INTERVAL):
            return
        with self.mu:  # also serialises writers of the .tmp file
            report = {
                "messages": self.messages, "firstSeq": self.first_seq,
                "lastSeq": self.last_seq, "firstType": self.first_type,
                "inSyncAt": self.in_sync_at, "inSyncCount": self.in_sync_count,
                "afterInSync": self.after_in_sync, "seqErrors": self.seq_errors,
                "orderErrors": self.order_errors, "types": self.types,
                "activePolicies": sorted(p[1] for p in self.policies.values()),
                "activeProfiles": sorted(self.profiles), "ipSets": sorted(self.ipsets),
                "workloadEndpoints": sorted(self.weps), "hostEndpoints": sorted(self.heps),
                "error": self.error, "repliesSent": self.replies_sent, "mode": self.mode,
            }
            self.last_report, self.dirty = now, False
            tmp = self.report_path + ".tmp"
            try:
                with open(tmp, "w") as f:
                    json.dump(report, f, indent=1, sort_keys=True)
                os.replace(tmp, self.report_path)
            except OSError as e:
                log("cannot write report %s: %s" % (self.report_path, e))

    def finish(self, code):
        self.stop.set()
        self.write_report(force=True)
        sys.stdout.flush()
        sys.exit(code)

    def fail(self, what):
        """Malformed input: report it and exit 1."""
        with self.mu:
            self.error = what
        log("malformed input on fd 3: " + what)
        self.finish(1)

    # ---- id helpers ----

    @staticmethod
    def pkey(pid):
        """Identity of a PolicyID: all its fields (name, namespace, kind...)."""
        return tuple((f.name, getattr(pid, f.name)) for f in pid.DESCRIPTOR.fields)

    @staticmethod
    def plabel(tier, pid):
        extra = "".join(";%s=%s" % (f.name, getattr(pid, f.name))
                        for f in pid.DESCRIPTOR.fields
                        if f.name not in ("name", "tier") and getattr(pid, f.name))
        return "%s/%s%s" % (tier, pid.name, extra)

    @staticmethod
    def idstr(msg_id):
        return "/".join(str(getattr(msg_id, f.name)) for f in msg_id.DESCRIPTOR.fields)

    def rule_sets(self, body):
        refs = set()
        for rule in list(body.inbound_rules) + list(body.outbound_rules):
            for f in self.set_fields:
                refs.update(getattr(rule, f))
        return refs

    def err(self, idx, text):
        self.order_errors.append("message %d: %s" % (idx, text))

    def endpoint_refs(self, idx, what, ep):
        """Check an endpoint's policies and profiles are active; return them."""
        pols, profs = set(), set(ep.profile_ids)
        for f in ep.DESCRIPTOR.fields:   # tiers, untracked_tiers, pre_dnat_tiers...
            if f.message_type is None or f.message_type.name != "TierInfo":
                continue
            for tier in getattr(ep, f.name):
                for pf in tier.DESCRIPTOR.fields:
                    if not pf.name.endswith("_policies"):
                        continue
                    for ref in getattr(tier, pf.name):
                        if isinstance(ref, str):   # policies given by bare name
                            key = next((k for k, p in self.policies.items()
                                        if p[0] == tier.name and dict(k).get("name") == ref),
                                       (("name", ref),))
                            label = "%s/%s" % (tier.name, ref)
                        else:
                            key, label = self.pkey(ref), self.plabel(tier.name, ref)
                        pols.add(key)
                        pol = self.policies.get(key)
                        if pol is None:
                            self.err(idx, "%s lists inactive policy %s in %s.%s"
                                     % (what, label, f.name, pf.name))
                        elif pol[0] and pol[0] != tier.name:
                            self.err(idx, "%s lists policy %s under tier %r but it "
                                     "is active in tier %r" % (what, label, tier.name, pol[0]))
        for name in sorted(profs - set(self.profiles)):
            self.err(idx, "%s references inactive profile %r" % (what, name))
        return pols, profs

    # ---- message handling ----

    def handle(self, idx, msg, kind):
        body = getattr(msg, kind)
        seq = msg.sequence_number
        if self.first_seq is None:
            self.first_seq = seq
        elif seq != self.last_seq + 1:
            self.seq_errors.append("message %d: sequence_number %d, expected %d"
                                   % (idx, seq, self.last_seq + 1))
        self.last_seq = seq
        self.types[kind] = self.types.get(kind, 0) + 1
        if idx == 0:
            self.first_type = kind
            if kind != "config_update":
                self.err(idx, "first message is %s, expected config_update" % kind)
        if self.in_sync_at is not None:
            self.after_in_sync += 1

        if kind == "in_sync":
            self.in_sync_count += 1
            if self.in_sync_count > 1:
                self.err(idx, "InSync number %d (must come exactly once)" % self.in_sync_count)
            else:
                self.on_in_sync(idx)
        elif kind == "ipset_update":
            self.ipsets.add(body.id)
        elif kind == "ipset_delta_update":
            if body.id not in self.ipsets:
                self.err(idx, "IPSetDeltaUpdate for undefined IP set %r" % body.id)
        elif kind == "ipset_remove":
            users = sorted([p[1] for p in self.policies.values() if body.id in p[2]] +
                           ["profile " + n for n, r in self.profiles.items() if body.id in r])
            if users:
                self.err(idx, "IPSetRemove %r while still used by %s" % (body.id, ", ".join(users)))
            self.ipsets.discard(body.id)
        elif kind in ("active_policy_update", "active_profile_update"):
            is_pol = kind == "active_policy_update"
            rules = body.policy if is_pol else body.profile
            if is_pol:
                tier = rules.tier if "tier" in rules.DESCRIPTOR.fields_by_name \
                    else getattr(body.id, "tier", "")
                name = self.plabel(tier, body.id)
            else:
                name = "profile " + body.id.name
            refs = self.rule_sets(rules)
            missing = sorted(refs - self.ipsets)
            if missing:
                self.err(idx, "%s uses undefined IP set(s) %s" % (name, ", ".join(missing)))
            if is_pol:
                self.policies[self.pkey(body.id)] = (tier, name, refs)
            else:
                self.profiles[body.id.name] = refs
        elif kind in ("active_policy_remove", "active_profile_remove"):
            is_pol = kind == "active_policy_remove"
            key = self.pkey(body.id) if is_pol else body.id.name
            slot = 0 if is_pol else 1   # endpoint refs are (policy keys, profile names)
            users = sorted(["workload " + i for i, r in self.weps.items() if key in r[slot]] +
                           ["host " + i for i, r in self.heps.items() if key in r[slot]])
            if users:
                name = self.policies[key][1] if key in self.policies else body.id.name
                self.err(idx, "%s of %s while still used by %s"
                         % (kind, name, ", ".join(users)))
            (self.policies if is_pol else self.profiles).pop(key, None)
        elif kind in ENDPOINT_KINDS:   # reply with the matching status message
            prefix, verb = kind.rsplit("_", 1)          # e.g. "host_endpoint", "remove"
            eps = self.weps if prefix.startswith("workload") else self.heps
            ident, reply = self.idstr(body.id), prefix + "_status_" + verb
            cls = getattr(self.pb, self.pb.FromDataplane.DESCRIPTOR
                          .fields_by_name[reply].message_type.name)
            if verb == "update":
                eps[ident] = self.endpoint_refs(idx, prefix + " " + ident, body.endpoint)
                self.send(**{reply: cls(id=body.id, status=self.pb.EndpointStatus(status="up"))})
            else:
                eps.pop(ident, None)
                self.send(**{reply: cls(id=body.id)})

    def on_in_sync(self, idx):
        print("test-driver: in sync after %d messages" % idx, flush=True)
        self.send_status()
        self.send(dataplane_in_sync=self.pb.DataplaneInSync())
        self.in_sync_at = idx   # also starts the periodic status in background()
        self.write_report(force=True)
        if self.mode == "garbage":
            with self.out_mu:
                self.write_raw(struct.pack("<Q", 5) + b"\xff" * 5)
        elif self.mode == "exit":
            log("exiting with 3 as asked")
            self.finish(3)

    def run(self, inp):
        while True:
            idx = self.messages
            hdr = inp.read(8)
            if not hdr:
                break
            if len(hdr) < 8:
                self.fail("EOF inside the length prefix of frame %d (%d of 8 bytes)"
                          % (idx, len(hdr)))
            (length,) = struct.unpack("<Q", hdr)
            if length > MAX_FRAME:
                self.fail("frame %d length %d exceeds the 256 MiB limit" % (idx, length))
            data = inp.read(length) if length else b""
            if len(data) < length:
                self.fail("EOF inside frame %d: got %d of %d bytes" % (idx, len(data), length))
            msg = self.pb.ToDataplane()
            try:
                msg.ParseFromString(data)
            except Exception as e:
                self.fail("frame %d (%d bytes) is not a decodable ToDataplane: %s"
                          % (idx, length, e))
            kind = msg.WhichOneof("payload")
            if kind is None:
                self.fail("frame %d (%d bytes, sequence_number %d) has no payload set"
                          % (idx, length, msg.sequence_number))
            with self.mu:
                self.messages += 1
                self.dirty = True
                self.handle(idx, msg, kind)
                self.write_report()
            if self.mode == "slow":
                time.sleep(0.2)
        with self.mu:
            if self.in_sync_count == 0:
                self.err(self.messages, "EOF before any InSync")
        log("EOF on fd 3 after %d messages" % self.messages)
        self.finish(0)


def main():
    mode = os.environ.get("FELIX_TEST_DRIVER_MODE") or "normal"
    if mode not in MODES:
        log("unknown FELIX_TEST_DRIVER_MODE %r (want one of %s)" % (mode, ", ".join(MODES)))
        sys.exit(2)
    pb = load_bindings()
    try:
        os.fstat(4)
        inp = os.fdopen(3, "rb")
    except OSError as e:
        log("fd 3 (input) and fd 4 (output) must be open: %s" % e)
        sys.exit(2)
    driver = Driver(pb, mode, os.environ.get("FELIX_TEST_DRIVER_REPORT"))
    signal.signal(signal.SIGTERM, lambda *_: (log("SIGTERM"), driver.finish(0)))
    print("test-driver: started pid %d" % os.getpid(), flush=True)
    driver.write_report(force=True)
    threading.Thread(target=driver.background, daemon=True).start()
    driver.run(inp)


if __name__ == "__main__":
    main()
