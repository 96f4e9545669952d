# SPDX-License-Identifier: Apache-2.0
"""Several hosts (issue 19), as libsbxclient's sbx_fleet: endpoints (a list,
a comma list, $SBX_ENDPOINTS) and dns+srv://_sbx._tcp.NAME discovery
(dnspython, python3-dnspython in Debian; re-resolved after the records'
TTL), placement from each host's Health (cached health_ttl seconds), and
creates that carry an idempotency key and go to another host only after a
definite refusal or when the host cannot be reached.

    import sbx_client
    with sbx_client.fleet("dns+srv://_sbx._tcp.sbx.example", token=T,
                          tls={"ca": "ca.pem", "cert": "c.pem", "key": "c.key"}) as f:
        with f.create_run({"image": "host"}) as run:
            print(run.handle)          # RUN_ID@HOST:PORT
        f.run("r-...@h2.sbx.example:7443").status()
"""
import os
import random
import secrets
import threading
import time

from . import errors, wire
from .client import DEFAULT_TIMEOUT, Client

SRV_SCHEME = "dns+srv://"
DEFAULT_SAMPLE = 3
DEFAULT_ATTEMPTS = 3
DEFAULT_HEALTH_TTL = 2.0   # seconds: placement costs no round trip per create
DEFAULT_BACKOFF = 5.0      # seconds a host that cannot be reached is left out (doubling)
BACKOFF_MAX = 60.0
HEALTH_TIMEOUT = 3.0       # a dead or black-holed host costs at most this per probe
TIMEOUT_RETRIES = 3        # one host's CreateRun tries while it times out
IN_PROGRESS_FIRST = 0.05   # pauses before asking again a host whose earlier
IN_PROGRESS_MAX = 1.0      # attempt of the create still runs (in_progress)
SRV_RETRY = 5.0            # a failed lookup keeps the last hosts this long


def split_endpoints(value):
    """A list of endpoints from a string (comma list) or a list of them
    (each may be a comma list); each checked."""
    items = [value] if isinstance(value, str) else list(value or [])
    out = []
    for item in items:
        for e in item.split(","):
            e = e.strip()
            if not e:
                raise errors.InvalidArgument("endpoints %s: an empty entry" % item)
            check_endpoint(e)
            out.append(e)
    if not out:
        raise errors.InvalidArgument("endpoints: none")
    return out


def check_endpoint(e):
    if e.startswith(SRV_SCHEME):
        name = e[len(SRV_SCHEME):]
        ok = (name.startswith("_") and 0 < len(name) <= 253 and ".." not in name and
              all(c.isalnum() or c in "._-" for c in name))
        if not ok:
            raise errors.InvalidArgument(
                "endpoint %s: must be dns+srv://_SERVICE._tcp.NAME "
                "(e.g. dns+srv://_sbx._tcp.sbx.example)" % e)
        return
    wire.Endpoint.parse(e)


def host_name_of(url):
    """The name a URL's host goes by: HOST:PORT; an ipc:// URL as itself."""
    scheme, _, rest = url.partition("://")
    return url if scheme == "ipc" else rest


def parse_handle(handle):
    """(run_id, host or None) of "RUN_ID" or "RUN_ID@HOST:PORT"."""
    run_id, at, host = handle.partition("@")
    if not run_id or len(run_id) > 128 or (at and (not host or "@" in host)):
        raise errors.InvalidArgument("run %s: RUN_ID or RUN_ID@HOST:PORT expected" % handle)
    return run_id, host or None


def srv_targets(records):
    """The usable SRV records, as (priority, target, port, ttl): a target
    "." (no service) and port 0 left out, trailing dots dropped, ordered
    by priority then name. records: (priority, weight, port, target, ttl)."""
    out = []
    for prio, _weight, port, target, ttl in records:
        target = target.rstrip(".")
        if target and port:
            out.append((prio, target, port, ttl))
    return sorted(out)


def score(load, pending=0):
    """As sbx_placement_score: how full the host would be with one more run
    (the largest of committed CPU and memory over allowed, used slots over
    runs_max), lower is better; < 0: it cannot take one. load: a Health."""
    slots = min(load.run_slots_free, load.identity_run_slots_free)
    if load.state != "serving" or pending >= slots:
        return -1.0
    used = max(load.runs_max - load.run_slots_free, 0)
    per_cpu = load.committed_cpu_millis / used if used else 0
    per_mem = load.committed_memory_mb / used if used else 0
    s = (used + pending + 1) / load.runs_max if load.runs_max else 0.0
    if load.allowed_cpu_millis:
        s = max(s, (load.committed_cpu_millis + per_cpu * pending) / load.allowed_cpu_millis)
    if load.allowed_memory_mb:
        s = max(s, (load.committed_memory_mb + per_mem * pending) / load.allowed_memory_mb)
    return s


def _resolver():
    try:
        import dns.resolver
    except ImportError:
        raise errors.Unavailable("dns+srv:// needs dnspython (Debian: python3-dnspython)") \
            from None
    server = os.environ.get("SBX_DNS_SERVER")
    if not server:
        return dns.resolver.Resolver()
    # A test and debug knob: the DNS server to ask instead of resolv.conf's.
    r = dns.resolver.Resolver(configure=False)
    host, _, port = server.rpartition(":") if server.count(":") == 1 else (server, "", "")
    r.nameservers = [host.strip("[]")]
    r.port = int(port) if port else 53
    return r


def resolve_srv(endpoint):
    """[(name, url, server_name)] of a dns+srv:// endpoint and the least TTL."""
    import dns.exception
    r = _resolver()
    name = endpoint[len(SRV_SCHEME):]
    try:
        ans = r.resolve(name, "SRV", lifetime=4.0)
    except dns.exception.DNSException as e:
        raise errors.Unavailable("%s: %s" % (endpoint, e)) from None
    recs = [(x.priority, x.weight, x.port, x.target.to_text(), ans.rrset.ttl) for x in ans]
    hosts, ttl = [], ans.rrset.ttl
    for _prio, target, port, _ttl in srv_targets(recs):
        addr = None
        for rdtype in ("A", "AAAA"):
            try:
                a = r.resolve(target, rdtype, lifetime=4.0)
            except dns.exception.DNSException:
                continue
            addr = a[0].to_text() if rdtype == "A" else "[%s]" % a[0].to_text()
            ttl = min(ttl, a.rrset.ttl)
            break
        if addr:
            hosts.append(("%s:%d" % (target, port), "tls+tcp://%s:%d" % (addr, port), target))
    if not hosts:
        raise errors.Unavailable("%s: no SRV target has an address" % endpoint)
    return hosts, ttl


class _Host:
    def __init__(self, name, url, server_name=None):
        self.name, self.url, self.server_name = name, url, server_name
        self.client = None
        self.listed = True
        self.health, self.health_at, self.health_error = None, 0.0, ""
        self.excluded_until, self.backoff = 0.0, 0.0
        self.inflight = self.made = 0


class Fleet:
    """Several sbxd hosts; thread-safe. options: as connect()'s (retries,
    max_message_bytes, ...), given to every host's Client."""

    def __init__(self, endpoints=None, token=None, tls=None, timeout=DEFAULT_TIMEOUT,
                 sample=DEFAULT_SAMPLE, attempts=DEFAULT_ATTEMPTS,
                 health_ttl=DEFAULT_HEALTH_TTL, backoff=DEFAULT_BACKOFF, **options):
        endpoints = (endpoints or os.environ.get("SBX_ENDPOINTS") or
                     os.environ.get("SBX_ENDPOINT") or wire.DEFAULT_ENDPOINT)
        self.endpoints = split_endpoints(endpoints)
        self.token, self.tls, self.timeout, self.options = token, wire.TLS.of(tls), timeout, options
        self.sample, self.attempts = sample, attempts
        self.health_ttl, self.backoff = health_ttl, backoff
        self._lock = threading.Lock()
        self._hosts = {}
        self._resolve_at = None
        for e in self.endpoints:
            if e.startswith(SRV_SCHEME):
                self._resolve_at = 0.0
            else:
                self._hosts[host_name_of(e)] = _Host(host_name_of(e), e)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes every host's connections."""
        with self._lock:
            hosts = list(self._hosts.values())
        for h in hosts:
            if h.client:
                h.client.close()

    # ---- the host list
    def _refresh(self):
        """With the lock held: the SRV endpoints looked up again if due."""
        now = time.monotonic()
        if self._resolve_at is None or now < self._resolve_at:
            return
        found, ttl, last = [], None, None
        for e in self.endpoints:
            if not e.startswith(SRV_SCHEME):
                continue
            try:
                hosts, t = resolve_srv(e)
            except errors.SbxError as ex:
                last = ex
                continue
            found += hosts
            ttl = t if ttl is None else min(ttl, t)
        if ttl is None:
            self._resolve_at = now + SRV_RETRY
            if not any(h.listed and h.server_name for h in self._hosts.values()):
                raise last
            return
        for h in self._hosts.values():
            if h.server_name:
                h.listed = False
        for name, url, server_name in found:
            h = self._hosts.get(name)
            if h is None or h.url != url:
                old = h
                h = self._hosts[name] = _Host(name, url, server_name)
                if old:
                    h.client = None  # the old client stays with its callers
            h.listed = True
        self._resolve_at = now + min(max(ttl, 1), 3600)

    def hosts(self):
        """The names of the hosts listed now."""
        with self._lock:
            self._refresh()
            return [h.name for h in self._hosts.values() if h.listed]

    def _client(self, h):
        if h.client is None:
            tls = self.tls
            if h.server_name and tls is not None and not tls.server_name:
                tls = wire.TLS(tls.ca, tls.cert, tls.key, h.server_name)
            if not h.url.startswith("tls+tcp://"):
                tls = None
            h.client = Client(h.url, token=self.token, tls=tls, timeout=self.timeout,
                              **self.options)
            h.client.host_name = h.name
        return h.client

    def client(self, host):
        """The Client of a host by name (a run handle's); a name not listed
        is dialed as tls+tcp://HOST. It asks that host only."""
        with self._lock:
            h = self._hosts.get(host)
            if h is None:
                # Not known yet: maybe an SRV target, dialed at its address.
                # A known host's calls do not wait on DNS.
                try:
                    self._refresh()
                except errors.SbxError:
                    pass
                h = self._hosts.get(host)
            if h is None:
                url = host if "://" in host else "tls+tcp://" + host
                check_endpoint(url)
                h = self._hosts[host] = _Host(host, url)
                h.listed = False
            return self._client(h)

    def run(self, handle):
        """A Run for "RUN_ID@HOST:PORT" (no call is made); its calls go to
        that host only and fail Unavailable naming it when it does not answer."""
        run_id, host = parse_handle(handle)
        if not host:
            raise errors.InvalidArgument("run %s: several hosts: RUN_ID@HOST:PORT expected"
                                         % handle)
        r = self.client(host).run(run_id)
        r.host = host
        return r

    def health(self):
        """{host: Health or the SbxError it raised}, every listed host."""
        out = {}
        for name in self.hosts():
            try:
                out[name] = self.client(name).health()
            except errors.SbxError as e:
                out[name] = e
        return out

    # ---- placement
    def _exclude(self, h):
        h.backoff = min(h.backoff * 2 if h.backoff else self.backoff, BACKOFF_MAX)
        h.excluded_until = time.monotonic() + h.backoff
        h.health = None

    def _fresh_health(self, h):
        """With the lock held (released for the call): h's Health, cached."""
        if h.health is not None and time.monotonic() - h.health_at < self.health_ttl:
            return h.health
        c = self._client(h)
        self._lock.release()
        try:
            got = c.call("Health", _pb().HealthRequest(), _pb().HealthResponse,
                         timeout=min(HEALTH_TIMEOUT, self.timeout))
            err = None
        except errors.SbxError as e:
            got, err = None, e
        finally:
            self._lock.acquire()
        if err is not None:
            h.health_error = str(err)
            if isinstance(err, (errors.Unavailable, errors.DeadlineExceeded)):
                self._exclude(h)
            return None
        from .results import Health
        h.health = Health.of(got)
        h.health_at, h.made, h.backoff = time.monotonic(), 0, 0.0
        h.health_error = "" if h.health.state == "serving" else "draining"
        return h.health

    def _place(self, tried, why):
        now = time.monotonic()
        for pass_ in (0, 1):
            cand = [h for h in self._hosts.values()
                    if h.listed and now >= h.excluded_until and (pass_ or h.name not in tried)]
            random.shuffle(cand)
            best, best_s, found = None, None, 0
            for h in cand:
                if found >= self.sample:
                    break
                load = self._fresh_health(h)
                if load is None or load.state != "serving":
                    why.append("%s: %s" % (h.name, h.health_error or "not serving"))
                    continue
                found += 1
                s = score(load, h.inflight + h.made)
                s = 1e9 if s < 0 else s
                if best is None or s < best_s:
                    best, best_s = h, s
            if best:
                return best
        return None

    def create_run(self, policy, inputs=None, labels=None, upload=True, idempotency_key=None,
                   input_dir=None):
        """Places and creates a run (Client.create_run's arguments); the Run
        has .host and .handle. At most `attempts` hosts, each named in the
        final error."""
        key = idempotency_key or secrets.token_hex(16)
        tries, why, tried = [], [], set()
        last, exhausted = None, False
        with self._lock:
            self._refresh()
            for _ in range(self.attempts):
                h = self._place(tried, why)
                if h is None:
                    break
                tried.add(h.name)
                c = self._client(h)
                h.inflight += 1
                self._lock.release()
                rid = wire.new_request_id()
                try:
                    run, err = None, None
                    # As long as the timeouts could take, an answer that an
                    # earlier attempt still runs there is asked again.
                    give_up = time.monotonic() + self.timeout * (TIMEOUT_RETRIES + 1)
                    pause, timeouts = IN_PROGRESS_FIRST, 0
                    # CreateRun alone: its tries are one call to sbxd. The
                    # upload comes after, once (its errors are not the
                    # create's, whatever their code).
                    while True:
                        try:
                            run = c._create_run(policy, inputs, labels, False, rid,
                                                input_dir, key, keep_on_failure=False)
                            err = None
                            break
                        except errors.DeadlineExceeded as e:
                            err = e  # the same host, the same key, again
                            timeouts += 1
                            if timeouts > TIMEOUT_RETRIES:
                                break
                        except errors.Unavailable as e:
                            err = e
                            if not e.in_progress or time.monotonic() + pause > give_up:
                                break
                            time.sleep(pause)
                            pause = min(pause * 2, IN_PROGRESS_MAX)
                        except errors.SbxError as e:
                            err = e
                            break
                    if err is None and upload:
                        # A key of the caller's: a run whose upload failed
                        # is kept for its retry on this host (named in the
                        # error), never placed again elsewhere. The Fleet's
                        # own key: torn down, and another host may be tried.
                        try:
                            c._upload_declared(run, key, keep_on_failure=bool(idempotency_key))
                        except errors.SbxError as e:
                            run, err = None, e
                            if idempotency_key:
                                raise type(e)("CreateRun on %s: %s"
                                              % (h.name, e.message)) from None
                finally:
                    self._lock.acquire()
                    h.inflight -= 1
                if err is None:
                    h.made += 1
                    run.host = h.name
                    return run
                if err.in_progress:
                    # h may still make the run: another host could make a
                    # second. The caller may retry there with the key; the
                    # next creates go elsewhere for a while.
                    self._exclude(h)
                    raise errors.from_code(
                        err.code_value, "CreateRun on %s, still in progress there with "
                        "idempotency_key %s (not tried on another host, where it could make a "
                        "second run): %s" % (h.name, key, err.message), True) from None
                last = err
                tries.append("%s: %s" % (h.name, err))
                exhausted = exhausted or isinstance(err, errors.ResourceExhausted)
                draining = isinstance(err, errors.Unavailable) and "draining" in str(err)
                if isinstance(err, errors.ResourceExhausted) or draining:
                    h.health = None  # asked again before placing there
                elif isinstance(err, (errors.Unavailable, errors.DeadlineExceeded)):
                    self._exclude(h)
                else:
                    raise type(err)("CreateRun on %s: %s" % (h.name, err.message)) from None
        if not tries:
            raise errors.Unavailable("CreateRun: no host is serving (%s)"
                                     % ("; ".join(why) or "none listed"))
        cls = errors.ResourceExhausted if exhausted else type(last)
        raise cls("CreateRun: no host took the run: %s%s" % (
            "; ".join(tries), "; not tried: " + "; ".join(why) if why else ""))


def _pb():
    from .proto import sandbox_pb2
    return sandbox_pb2


def fleet(endpoints=None, token=None, tls=None, timeout=DEFAULT_TIMEOUT, **options):
    """A Fleet of endpoints (a list, a comma list, dns+srv://...; default
    $SBX_ENDPOINTS, $SBX_ENDPOINT, else the local socket)."""
    return Fleet(endpoints, token=token, tls=tls, timeout=timeout, **options)
