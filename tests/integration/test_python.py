# SPDX-License-Identifier: Apache-2.0
"""Real Python inside the sandbox: the reconciliation example, and ordinary
stdlib-heavy scripts that must run unchanged (files, sqlite, threads,
processes, /dev/shm semaphores, loopback sockets, asyncio, ssl, locale)."""
import csv
import gzip
import hashlib
import json
import os
import subprocess
import tarfile
import zipfile

from sbxtest import PYTHON, SOURCE_DIR, SandboxTest, read_text, run_tests

EXAMPLE = os.path.join(SOURCE_DIR, "packaging", "examples", "reconcile")


class Reconcile(SandboxTest):
    def test_reconcile_example(self):
        out = os.path.join(self.tmp, "out")
        with open(os.path.join(EXAMPLE, "policy.json")) as f:
            pol = json.load(f)
        r = self.run_sandbox([PYTHON, "/data/reconcile.py"], pol=pol, data=False,
                             extra=["--data", EXAMPLE], out=out)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.stderr, "", r)
        self.assertIn("reconciled 25 ledger entries against 26 settlements", r.stdout)
        self.assertIn("wrote /out/report.csv and /out/summary.json", r.stdout)
        self.assertEqual(r.result["exit_reason"], "exited")
        self.assertEqual(r.result["out"]["files"], 2, r)

        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        # The discrepancies planted in ledger.csv / settlement.csv:
        #   INV-2026-0105 has no settlement; 0110 settled 4500.00 for 4800.00;
        #   0114 settled twice; 0116 booked net of fee (970.30 of 1000.00);
        #   0121 booked in EUR, settled in USD; 0199 settled with no ledger
        #   entry. 0103's reference differs only in case and blanks: matched.
        self.assertEqual(summary["counts"], {
            "matched": 20, "fee_difference": 1, "amount_mismatch": 1,
            "currency_mismatch": 1, "duplicate_settlement": 1, "missing_settlement": 1,
            "unmatched_settlement": 1, "duplicate_ledger": 0, "invalid": 0})
        self.assertEqual(summary["discrepancies"], 6)
        self.assertEqual(summary["ledger_entries"], 25)
        self.assertEqual(summary["settlement_rows"], 26)
        self.assertEqual(summary["report_rows"], 26)
        self.assertEqual(summary["ledger_file"], "/data/ledger.csv")

        with open(os.path.join(out, "report.csv"), newline="") as f:
            rows = {row["ref"]: row for row in csv.DictReader(f)}
        self.assertEqual(len(rows), 26)
        expect = {
            "INV-2026-0105": ("missing_settlement", "-999.00"),
            "INV-2026-0110": ("amount_mismatch", "-300.00"),
            "INV-2026-0114": ("duplicate_settlement", "22.50"),
            "INV-2026-0116": ("fee_difference", "29.70"),
            "INV-2026-0121": ("currency_mismatch", ""),
            "INV-2026-0199": ("unmatched_settlement", "215.00"),
            "INV-2026-0103": ("matched", "0.00"),
        }
        for ref, (status, diff) in expect.items():
            self.assertEqual((rows[ref]["status"], rows[ref]["difference"]), (status, diff), ref)
        # Independent of the sandbox: the same script on the host agrees.
        host_out = os.path.join(self.tmp, "host-out")
        subprocess.run([PYTHON, os.path.join(EXAMPLE, "reconcile.py"),
                        os.path.join(EXAMPLE, "ledger.csv"),
                        os.path.join(EXAMPLE, "settlement.csv"), "--out", host_out],
                       check=True, capture_output=True)
        self.assertEqual(read_text(os.path.join(host_out, "report.csv")),
                         read_text(os.path.join(out, "report.csv")))


SCRIPTS = {
    "data_formats": r"""
import csv, datetime, io, json
from decimal import Decimal, ROUND_HALF_EVEN
rows = [{"id": i, "amount": str((Decimal(i) / 3).quantize(Decimal("0.01"), ROUND_HALF_EVEN)),
         "day": (datetime.date(2026, 2, 27) + datetime.timedelta(days=i)).isoformat()}
        for i in range(1, 5)]
buf = io.StringIO()
w = csv.DictWriter(buf, fieldnames=["id", "amount", "day"], lineterminator="\n")
w.writeheader(); w.writerows(rows)
back = list(csv.DictReader(io.StringIO(buf.getvalue())))
total = sum(Decimal(r["amount"]) for r in back)
ts = datetime.datetime(2026, 3, 1, 12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
print(json.dumps({"days": [r["day"] for r in back], "total": str(total),
                  "utc": ts.astimezone(datetime.timezone.utc).isoformat()}, sort_keys=True))
""",
    "sqlite": r"""
import sqlite3
for path in (":memory:", "/tmp/t.db"):
    c = sqlite3.connect(path)
    if path != ":memory:":
        print(c.execute("pragma journal_mode=wal").fetchone()[0])
    c.execute("create table t (k integer primary key, v text)")
    c.executemany("insert into t (v) values (?)", [("v%d" % i,) for i in range(1000)])
    c.commit()
    print(path, c.execute("select count(*), sum(k) from t").fetchone())
    c.close()
c = sqlite3.connect("/tmp/t.db")
print("reopened", c.execute("select v from t where k = 500").fetchone()[0])
""",
    "crypto": r"""
import hashlib, hmac, secrets
print(hashlib.sha256(b"abc").hexdigest())
print(hashlib.blake2b(b"abc", digest_size=16).hexdigest())
print(hmac.new(b"key", b"The quick brown fox jumps over the lazy dog", "sha256").hexdigest())
a, b = secrets.token_hex(16), secrets.token_hex(16)
print(len(a), a != b, secrets.randbelow(10) < 10)
""",
    "archives": r"""
import gzip, io, os, tarfile, zipfile, zlib
data = b"sandbox " * 10000
z = zlib.compress(data, 9)
assert zlib.decompress(z) == data
with gzip.open("/out/data.gz", "wb") as f:
    f.write(data)
with zipfile.ZipFile("/out/data.zip", "w", zipfile.ZIP_DEFLATED) as zf:
    zf.writestr("a.txt", data)
    zf.writestr("dir/b.txt", b"bee\n")
with tarfile.open("/out/data.tar.gz", "w:gz") as tf:
    info = tarfile.TarInfo("c.txt"); info.size = len(data)
    tf.addfile(info, io.BytesIO(data))
with tarfile.open("/out/data.tar.gz") as tf:
    assert tf.extractfile("c.txt").read() == data
print(len(z) < len(data) // 100, sorted(os.listdir("/out")))
""",
    "threads": r"""
import threading
barrier = threading.Barrier(8, timeout=20)
results = [None] * 8
def work(i):
    barrier.wait()            # all 8 threads alive at once
    results[i] = sum(range(i * 100000))
    barrier.wait()
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print(threading.active_count(), results == [sum(range(i * 100000)) for i in range(8)])
""",
    "multiproc": r"""
import multiprocessing as mp, os
def square(x):
    return x * x, os.getpid()
if __name__ == "__main__":
    with mp.Pool(2) as pool:
        out = pool.map(square, range(20))
    print([v for v, _ in out] == [x * x for x in range(20)], len({p for _, p in out}) >= 1)
    lock = mp.Lock()                 # a POSIX semaphore (sem_open in /dev/shm)
    counter = mp.Value("i", 0, lock=True)
    def bump(c):
        for _ in range(1000):
            with c.get_lock():
                c.value += 1
    ps = [mp.Process(target=bump, args=(counter,)) for _ in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()
    print(counter.value, [p.exitcode for p in ps])
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        print(pool.apply(square, (7,))[0])
""",
    "subproc_tempfile": r"""
import os, subprocess, tempfile
p = subprocess.run(["/bin/echo", "hello", "from", "echo"], capture_output=True, text=True)
print(p.returncode, p.stdout.strip())
print(subprocess.check_output("echo $((6*7))", shell=True, text=True).strip())
print(tempfile.gettempdir())
with tempfile.TemporaryDirectory() as d:
    with tempfile.NamedTemporaryFile("w+", dir=d, delete=False) as f:
        f.write("tmp content"); name = f.name
    print(open(name).read(), os.path.dirname(name) == d)
print(os.path.exists(d))
""",
    "sockets": r"""
import socket, threading
a, b = socket.socketpair()
a.sendall(b"ping"); print(b.recv(4).decode())
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(4)
port = srv.getsockname()[1]
def echo():
    for _ in range(3):
        c, _ = srv.accept()
        with c:
            while True:
                d = c.recv(65536)
                if not d: break
                c.sendall(d)
t = threading.Thread(target=echo, daemon=True); t.start()
for host in ("127.0.0.1", "localhost"):
    with socket.create_connection((host, port), timeout=10) as c:
        c.sendall(b"hello " + host.encode()); c.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            d = c.recv(65536)
            if not d: break
            got += d
        print(got.decode())
payload = bytes(range(256)) * 4096
with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
    threading.Thread(target=lambda: (c.sendall(payload), c.shutdown(socket.SHUT_WR))).start()
    got = bytearray()
    while True:
        d = c.recv(65536)
        if not d: break
        got += d
    print(len(got), bytes(got) == payload)
""",
    "asyncio_": r"""
import asyncio
async def handle(r, w):
    data = await r.read(100)
    w.write(data.upper()); await w.drain(); w.close()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async def client(i):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"msg%d" % i); await w.drain()
        out = await r.read(100); w.close()
        return out.decode()
    got = await asyncio.gather(*(client(i) for i in range(5)))
    srv.close(); await srv.wait_closed()
    p = await asyncio.create_subprocess_exec("/bin/echo", "async", stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    await asyncio.sleep(0.01)
    return got, out.decode().strip(), p.returncode
print(asyncio.run(main()))
""",
    "ssl_": r"""
import os, ssl
ctx = ssl.create_default_context()
stats = ctx.cert_store_stats()
print(ctx.verify_mode == ssl.CERT_REQUIRED, ctx.check_hostname, stats["x509_ca"] > 50)
print(ssl.OPENSSL_VERSION.split()[0], os.path.isdir(ssl.get_default_verify_paths().capath))
""",
    "text": r"""
import locale, sys, unicodedata
print(unicodedata.name("\u00e9"), len(unicodedata.normalize("NFD", "\u00e9")),
      unicodedata.category("\u0663"), int("\u0663\u0664"))
print(sys.getfilesystemencoding(), locale.getpreferredencoding(False))
print(locale.setlocale(locale.LC_ALL, "C.UTF-8"))
print(locale.format_string("%.2f", 1234.5, grouping=True), "\u00fc".upper())
try:
    locale.setlocale(locale.LC_ALL, "xx_XX.UTF-8")
except locale.Error as e:
    print("no xx_XX:", e)
""",
}


class Stdlib(SandboxTest):
    def run_script(self, name, **kw):
        path = os.path.join(self.data, name + ".py")
        with open(path, "w") as f:
            f.write(SCRIPTS[name])
        r = self.run_sandbox([PYTHON, "/data/%s.py" % name], **kw)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.result["exit_reason"], "exited", r)
        return r

    def test_json_csv_decimal_datetime(self):
        r = self.run_script("data_formats")
        self.assertEqual(json.loads(r.stdout), {
            "days": ["2026-02-28", "2026-03-01", "2026-03-02", "2026-03-03"],
            "total": "3.33", "utc": "2026-03-01T10:30:00+00:00"})

    def test_sqlite_in_memory_and_on_tmp(self):
        r = self.run_script("sqlite")
        self.assertEqual(r.stdout, ":memory: (1000, 500500)\nwal\n/tmp/t.db (1000, 500500)\n"
                                   "reopened v499\n", r)

    def test_hashlib_hmac_secrets(self):
        r = self.run_script("crypto")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], hashlib.sha256(b"abc").hexdigest())
        self.assertEqual(lines[1], hashlib.blake2b(b"abc", digest_size=16).hexdigest())
        self.assertEqual(lines[2],
                         "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8")
        self.assertEqual(lines[3], "32 True True")

    def test_archives_written_to_out(self):
        out = os.path.join(self.tmp, "out")
        r = self.run_script("archives", out=out)
        self.assertEqual(r.stdout, "True ['data.gz', 'data.tar.gz', 'data.zip']\n", r)
        data = b"sandbox " * 10000
        with gzip.open(os.path.join(out, "data.gz")) as f:
            self.assertEqual(f.read(), data)
        with zipfile.ZipFile(os.path.join(out, "data.zip")) as zf:
            self.assertIsNone(zf.testzip())
            self.assertEqual(zf.read("a.txt"), data)
            self.assertEqual(zf.read("dir/b.txt"), b"bee\n")
        with tarfile.open(os.path.join(out, "data.tar.gz")) as tf:
            self.assertEqual(tf.extractfile("c.txt").read(), data)
        self.assertEqual(r.result["out"]["files"], 3, r)

    def test_eight_threads(self):
        r = self.run_script("threads")
        self.assertEqual(r.stdout, "1 True\n", r)

    def test_multiprocessing_pool_and_semaphores(self):
        r = self.run_script("multiproc")
        self.assertEqual(r.stdout, "True True\n2000 [0, 0]\n49\n", r)
        self.assertNotIn("Traceback", r.stderr, r)

    def test_subprocess_and_tempfile(self):
        r = self.run_script("subproc_tempfile")
        self.assertEqual(r.stdout, "0 hello from echo\n42\n/tmp\ntmp content True\nFalse\n", r)

    def test_socketpair_and_loopback_tcp_echo(self):
        r = self.run_script("sockets")
        self.assertEqual(r.stdout, "ping\nhello 127.0.0.1\nhello localhost\n%d True\n"
                         % (256 * 4096), r)

    def test_asyncio_server_clients_and_subprocess(self):
        r = self.run_script("asyncio_")
        self.assertEqual(r.stdout, "(['MSG0', 'MSG1', 'MSG2', 'MSG3', 'MSG4'], 'async', 0)\n", r)

    def test_ssl_default_context_loads_ca_certificates(self):
        if not os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
            self.skipTest("the host has no CA bundle (Debian package ca-certificates)")
        r = self.run_script("ssl_")
        self.assertEqual(r.stdout, "True True True\nOpenSSL True\n", r)

    def test_unicodedata_and_locale(self):
        r = self.run_script("text")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "LATIN SMALL LETTER E WITH ACUTE 2 Nd 34")
        # Empty environment: Python coerces the C locale to UTF-8 (PEP 538).
        self.assertEqual(lines[1].lower(), "utf-8 utf-8")
        self.assertEqual(lines[2], "C.UTF-8")
        self.assertEqual(lines[3], "1234.50 \u00dc")
        self.assertTrue(lines[4].startswith("no xx_XX:"), r)


if __name__ == "__main__":
    run_tests()
