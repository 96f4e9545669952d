# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# check_egress.sh — egress deny's connect watch on Debian 12's own kernel
# (6.1): what it counts is what that kernel sends back (RSTs, port
# unreachables, parameter problems, IP options echoed or quoted), and the
# filter sbxd attaches is classic BPF that kernel runs. The host's tests ran
# on a newer kernel only; these run the same checks here.

# The two unit tests that hold the filter to sbxd's reading of a packet
# (test_deny_packet: made packets through the kernel's filter on a unix
# datagram pair) and to what the kernel really sends (test_helper_netns: real
# namespaces, every record-route and timestamp layout from a process with no
# capability), as the developer.
check_egress_kernel() {
    local t out rc detail=""
    for t in test_deny_packet test_helper_netns; do
        [ -x "$BIN/tests/unit/$t" ] || {
            echo "$BIN/tests/unit/$t was not staged (packaging/vm/run.sh stages it from a build tree)"
            return 1
        }
        out=$(mktemp)
        chmod 0644 "$out"
        rc=0
        (cd /tmp && as_dev "$BIN/tests/unit/$t") > "$out" 2>&1 < /dev/null || rc=$?
        { echo "== $t: exit $rc"; cat "$out"; } >> "$LOG"
        if [ "$rc" != 0 ]; then
            printf '%s: exit %s: %s' "$t" "$rc" "$(grep -m1 -E '^not ok|FAIL|rror' "$out" | cut -c1-300)"
            rm -f "$out"; return 1
        fi
        detail+="$t $(tail -n 1 "$out" | cut -c1-120); "
        rm -f "$out"
    done
    printf '%s' "${detail%; }"
}

# One exec through sbxd's unit: 400 datagrams to a closed port of its own
# loopback (the filter drops their refusals, so they leave the exec's token
# budget alone), then one attempt of each kind the watch names. Every one is
# refused at once, counted once and named in order; the notice is said once.
EGRESS_PROG='import errno, socket
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
def tcp(fam, addr, opts=None):
    s = socket.socket(fam)
    if opts: s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, opts)
    s.settimeout(20)
    try:
        s.connect(addr); r = "CONNECTED"
    except OSError as e:
        r = name(e)
    print("tcp", addr[0], addr[1], r, flush=True)
def udp(fam, addr, opts=None):
    u = socket.socket(fam, socket.SOCK_DGRAM)
    if opts: u.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, opts)
    u.settimeout(20)
    u.connect(addr); u.send(b"x")
    try:
        u.recv(8); r = "ANSWERED"
    except OSError as e:
        r = name(e)
    print("udp", addr[0], addr[1], r, flush=True)
lo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(400):
    lo.sendto(b"x", ("127.0.0.2", 9))
RR40 = bytes([7, 39, 4]) + bytes(37)   # record route, 9 slots: echoed, quoted
RR_BAD = bytes([7, 8, 4]) + bytes(5)   # one slot, bytes to spare: refused on receipt
tcp(socket.AF_INET, ("192.0.2.1", 443))
udp(socket.AF_INET, ("198.51.100.7", 123))
udp(socket.AF_INET, ("203.0.113.5", 443), RR40)
udp(socket.AF_INET, ("203.0.113.6", 443), RR_BAD)
tcp(socket.AF_INET, ("192.0.2.9", 8443), RR40)
tcp(socket.AF_INET6, ("2001:db8::1", 80))
udp(socket.AF_INET6, ("2001:db8::7", 53))'
EGRESS_OUT='tcp 192.0.2.1 443 ECONNREFUSED
udp 198.51.100.7 123 ECONNREFUSED
udp 203.0.113.5 443 ECONNREFUSED
udp 203.0.113.6 443 EPROTO
tcp 192.0.2.9 8443 ECONNREFUSED
tcp 2001:db8::1 80 ECONNREFUSED
udp 2001:db8::7 53 ECONNREFUSED'
EGRESS_NAMES='["192.0.2.1:443", "198.51.100.7:123/udp", "203.0.113.5:443/udp", "203.0.113.6:443/udp", "192.0.2.9:8443", "[2001:db8::1]:80", "[2001:db8::7]:53/udp"]'
check_sbxd_egress_deny() {
    local d rc=0 got want notices
    sbxd_unit_up || return 1
    d=$(mktemp -d /tmp/sbxvm-egress.XXXXXX)
    chmod 0755 "$d"
    as_svc "$SBXCTL" --endpoint "$SBXD_ENDPOINT" run --json -- "$PY" -c "$EGRESS_PROG" \
        > "$d/result.json" 2> "$d/stderr" < /dev/null || rc=$?
    { echo "== sbxctl run --json (egress deny, every kind of attempt): exit $rc";
      cat "$d/result.json"; echo "-- stderr"; cat "$d/stderr"; } >> "$LOG"
    sbxd_journal
    if [ "$rc" != 0 ]; then
        printf 'sbxctl run: exit %s: %s' "$rc" "$(why "$d/stderr")"; rm -rf "$d"; return 1
    fi
    # The command's stdout is on stderr with --json, beside sbxd's notice.
    got=$(grep -E '^(tcp|udp) ' "$d/stderr" || true)
    if [ "$got" != "$EGRESS_OUT" ]; then
        printf 'the attempts were not all refused at once: %s' "$(printf '%s' "$got" | paste -sd '|')"
        rm -rf "$d"; return 1
    fi
    got=$("$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["network_denied_attempts"], json.dumps(r["network_denied_names"]))' "$d/result.json") || {
        echo "sbxctl's result is not the JSON object it should be"; rm -rf "$d"; return 1; }
    want="7 $EGRESS_NAMES"
    if [ "$got" != "$want" ]; then
        printf 'counted %s (want %s)' "$got" "$want"; rm -rf "$d"; return 1
    fi
    notices=$(grep -c 'network egress is denied by this run' "$d/stderr" || true)
    if [ "$notices" != 1 ] || ! grep -q 'tried to reach 192.0.2.1:443\.' "$d/stderr"; then
        printf 'the notice was said %s times (want once, naming 192.0.2.1:443)' "$notices"
        rm -rf "$d"; return 1
    fi
    echo "7 attempts refused at once, counted and named in order after 400 loopback refusals; one notice"
    rm -rf "$d"
}
