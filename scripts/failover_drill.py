"""The failover drill (run it as scripts/failover-drill, which explains the options): on one
machine, on loopback, in a temporary directory, a cluster as the production layout of
docs/operations/failover.md (etcd, three PostgreSQL servers managed by Patroni with synchronous
replication, HAProxy in front with Patroni's health checks), dealbroker's `serve` and `worker`
against it, a webhook receiver, and a load of deal creates; mid-load the primary's machine
"dies" (Patroni and PostgreSQL killed with SIGKILL), Patroni promotes a standby, and the drill
prints what the clients saw and what was lost.

Exit status: 0 when every run kept everything it acknowledged (no 201 lost, no deal without
its event, no 5xx but 503 with Retry-After, every request answered); 1 otherwise; 2 when the
drill itself could not be set up."""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

PG_BIN = Path("/usr/lib/postgresql/15/bin")
ROOT = Path(__file__).resolve().parent.parent
NODES = ("pg1", "pg2", "pg3")
SELLER = {
    "firstname": "Kari",
    "lastname": "Nordmann",
    "phone": "+47 400 00 000",
    "email": "kari@example.com",
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
}

# Patroni's timing, chosen for a fast failover on a network that does not drop packets (one
# machine here; a LAN in production):
# - ttl 10: the leader key's lease in etcd. A primary whose machine dies stops renewing it, and
#   the standbys wait for it to expire before one takes over, so the ttl bounds the failover
#   (8-10 s after the death, as the key was renewed 0-2 s before). Patroni's default is 30.
# - loop_wait 2: how often each Patroni runs its cycle (renews the key, checks PostgreSQL).
# - retry_timeout 4: how long Patroni retries etcd and PostgreSQL before it gives up on a cycle;
#   a primary that cannot renew its key within it demotes itself (it may have lost the key).
# Patroni's rule loop_wait + 2 * retry_timeout <= ttl holds (2 + 8 = 10): a primary always
# notices it lost etcd, and demotes, before its key can expire and another node take over. A
# shorter ttl fails over sooner but demotes a healthy primary on a slower etcd (a busy disk).
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 2, 4

# HAProxy asks each Patroni's REST API every 500 ms; `/primary` answers 200 only on the node
# holding the leader key and running as primary. Two failed checks (1 s) take a server out and
# close the sessions still open to it (`on-marked-down shutdown-sessions`), so no client waits on
# a dead machine's connection; one success puts the new primary in.
HAPROXY_CHECK = "inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions"

# With --archive: every node archives its WAL to one pgBackRest repository, a segment at the
# latest ARCHIVE_TIMEOUT after a write (archive_timeout), as docs/operations/backup-restore.md
# configures it.
ARCHIVING = {"archive_mode": "on", "archive_timeout": "10s"}


def say(line: str) -> None:
    """One line of the drill's report, at once (the runs are long)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL (so Patroni, which starts it) refuses to run as root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def psql(port: int, database: str, statement: str) -> list[str]:
    """One statement through psql on 127.0.0.1:``port``, its unaligned rows split on blanks;
    ``OSError`` with psql's message when it fails."""
    done = subprocess.run(
        [str(PG_BIN / "psql"), "-X", "-A", "-t", "-h", "127.0.0.1", "-p", str(port)]
        + ["-U", "postgres", "-d", database, "-c", statement],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(done.stderr.strip())
    return done.stdout.split()


class Fail(Exception):
    """The drill could not be set up (exit status 2)."""


def wait_for(what: str, check, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            found = None
        if found:
            return found
        time.sleep(interval)
    raise Fail(f"timed out after {timeout:g} s waiting for {what}")


@dataclass
class Node:
    name: str
    directory: Path
    pg_port: int
    api_port: int
    process: subprocess.Popen | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def postmaster(self) -> int | None:
        try:
            return int((self.directory / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


@dataclass
class Cluster:
    """etcd, three Patroni nodes and HAProxy, each a process in its own process group."""

    directory: Path
    synchronous: bool
    archive: bool = False  # every node archives its WAL to one pgBackRest repository
    processes: list[subprocess.Popen] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    frozen: list = field(default_factory=list)  # the process group, then the PostgreSQL pids

    def __post_init__(self) -> None:
        self.etcd_port, self.etcd_peer = free_port(), free_port()
        self.haproxy_port = free_port()
        for name in NODES:
            node = Node(name, self.directory / name, free_port(), free_port())
            node.directory.mkdir()
            self.nodes.append(node)
        self.repo = self.directory / "repo"
        self.repo.mkdir()
        if os.geteuid() == 0:
            for path in [self.directory, self.repo, *(n.directory for n in self.nodes)]:
                shutil.chown(path, "postgres", "postgres")

    def spawn(self, command: list[str], log: str) -> subprocess.Popen:
        with open(self.directory / log, "ab") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)
        return process

    def start(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        self.spawn(
            [
                "etcd",
                "--name=drill",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=drill={peer}",
                "--initial-cluster-state=new",
            ],
            "etcd.log",
        )
        wait_for("etcd", lambda: httpx.get(f"{client}/health", timeout=1).status_code == 200, 30)
        for node in self.nodes:
            if self.archive:
                self.backrest_config(node)
            config = node.directory / "patroni.yml"
            config.write_text(json.dumps(self.patroni_config(node), indent=2))  # JSON is YAML
            node.process = self.spawn(as_postgres(["patroni", str(config)]), f"{node.name}.log")
            if node is self.nodes[0]:  # the first bootstraps; the others copy it
                wait_for(f"{node.name} to bootstrap", lambda: self.leader(), 90)
        self.write_haproxy()
        self.spawn(["haproxy", "-db", "-f", str(self.directory / "haproxy.cfg")], "haproxy.log")
        wait_for("the cluster: a primary and two streaming standbys", self.healthy, 180)
        wait_for("HAProxy on the primary", self.haproxy_ready, 30)

    def patroni_config(self, node: Node) -> dict:
        return {
            "scope": "drill",
            "name": node.name,
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    # Only the synchronous standby may be promoted: it has every commit the
                    # primary acknowledged, so a failover loses none of them.
                    "synchronous_mode": self.synchronous,
                    "maximum_lag_on_failover": 1048576,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_log_hints": "on",
                            "max_connections": 200,
                            **(ARCHIVING if self.archive else {}),
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": [
                    "host all all 127.0.0.1/32 trust",
                    "host replication replicator 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.directory / "data"),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.directory / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "drill"},
                    "replication": {"username": "replicator", "password": "drill"},
                    "rewind": {"username": "postgres", "password": "drill"},
                },
                "parameters": {
                    "unix_socket_directories": str(node.directory),
                    # Each node pushes to the one repository with its own configuration, so
                    # whichever is the primary archives (a standby's archive_command waits).
                    **(
                        {"archive_command": " ".join([*self.backrest(node), "archive-push %p"])}
                        if self.archive
                        else {}
                    ),
                },
            },
        }

    def backrest(self, node: Node, *more: str) -> list[str]:
        """pgBackRest as ``node`` runs it (its own configuration, the drill's stanza)."""
        config = node.directory / "pgbackrest.conf"
        return [
            shutil.which("pgbackrest") or "pgbackrest",
            f"--config={config}",
            "--stanza=drill",
            *more,
        ]

    def backrest_config(self, node: Node) -> None:
        """One repository (in production a repository host or object storage every node
        reaches), and each node's own data directory as ``pg1``."""
        (node.directory / "pgbackrest.conf").write_text(
            f"""[global]
repo1-path={self.repo}
repo1-retention-full=2
log-path={node.directory}
lock-path={node.directory}
log-level-console=warn
start-fast=y
compress-type=lz4

[drill]
pg1-path={node.directory / "data"}
pg1-port={node.pg_port}
pg1-socket-path={node.directory}
pg1-user=postgres
"""
        )

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def run_backrest(self, node: Node, *command: str, timeout: float = 300) -> None:
        done = subprocess.run(
            as_postgres(self.backrest(node, *command)),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise Fail(
                f"pgbackrest {' '.join(command)} on {node.name}: {done.stderr.strip()[:500]}"
            )

    def start_archive(self) -> float:
        """The stanza and a full backup, taken from the primary: seconds the backup took."""
        leader = self.node(wait_for("a primary", self.leader, 30))
        self.run_backrest(leader, "stanza-create")
        self.run_backrest(leader, "check")
        started = time.monotonic()
        self.run_backrest(leader, "--type=full", "backup")
        return time.monotonic() - started

    def write_haproxy(self) -> None:
        servers = "\n".join(
            f"  server {n.name} 127.0.0.1:{n.pg_port} check port {n.api_port}" for n in self.nodes
        )
        (self.directory / "haproxy.cfg").write_text(
            f"""global
  maxconn 2000
defaults
  mode tcp
  timeout connect 2s
  # Long: the worker's LISTEN connection is idle between commits.
  timeout client 1h
  timeout server 1h
  timeout check 1s
listen primary
  bind 127.0.0.1:{self.haproxy_port}
  option httpchk GET /primary
  http-check expect status 200
  default-server {HAPROXY_CHECK}
{servers}
"""
        )

    def members(self) -> list[dict]:
        for node in self.nodes:
            try:
                return httpx.get(f"{node.api}/cluster", timeout=1).json()["members"]
            except (httpx.HTTPError, ValueError, KeyError):
                continue
        return []

    def leader(self) -> str | None:
        for member in self.members():
            if member["role"] == "leader" and member["state"] == "running":
                return member["name"]
        return None

    def healthy(self) -> bool:
        members = self.members()
        roles = Counter(m["role"] for m in members if m["state"] in ("running", "streaming"))
        standby = "sync_standby" if self.synchronous else "replica"
        return (
            roles["leader"] == 1
            and roles[standby] >= 1
            and len(members) == 3
            and all(m["state"] in ("running", "streaming") for m in members)
        )

    def haproxy_ready(self) -> bool:
        return self.psql("postgres", "SELECT NOT pg_is_in_recovery()") == ["t"]

    def psql(self, database: str, statement: str) -> list[str]:
        return psql(self.haproxy_port, database, statement)

    def kill(self, name: str, fault: str) -> None:
        """`machine`: Patroni, the postmaster and its backends all killed at once, as a machine
        that loses power; `postmaster`: PostgreSQL alone killed, its Patroni left to act;
        `stop`: Patroni stopped as an operator would (SIGTERM: it stops PostgreSQL, hands over);
        `freeze`: Patroni, the postmaster and its backends stopped (SIGSTOP), as a machine that
        hangs or drops off the network: connections are accepted by the kernel, never answered."""
        node = next(n for n in self.nodes if n.name == name)
        assert node.process is not None
        pid = node.postmaster()
        backends = []
        if pid is not None:
            children = Path(f"/proc/{pid}/task/{pid}/children")
            backends = [int(p) for p in children.read_text().split()] if children.exists() else []
        if fault == "stop":
            os.killpg(node.process.pid, signal.SIGTERM)
            return
        if fault == "freeze":
            os.killpg(node.process.pid, signal.SIGSTOP)
            for victim in [pid, *backends]:
                if victim is not None:
                    os.kill(victim, signal.SIGSTOP)
            self.frozen = [node.process.pid, pid, *backends]
            return
        if fault == "machine":
            os.killpg(node.process.pid, signal.SIGKILL)
        for victim in [pid, *backends] if fault == "machine" else [pid]:
            if victim is not None:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def close(self) -> None:
        for pid in self.frozen:  # a frozen node wakes, finds it lost its key, and stops
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, TypeError):
                continue
        if self.frozen:
            os.killpg(self.frozen[0], signal.SIGCONT)
        # HAProxy and the Patroni nodes first (each stops its PostgreSQL), etcd last.
        for group in (self.processes[1:], self.processes[:1]):
            for process in group:
                if process.poll() is None:
                    try:
                        os.killpg(process.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        continue
            for process in group:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
        for node in self.nodes:  # a postmaster Patroni started in a session of its own
            pid = node.postmaster()
            if pid is not None and Path(f"/proc/{pid}").exists():
                subprocess.run(
                    as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(node.directory / "data")])
                    + ["-m", "immediate", "stop"],
                    capture_output=True,
                    check=False,
                )


@dataclass
class Receiver:
    """A loopback webhook receiver: records each delivery's `webhook-id`, event and deal."""

    received: list[tuple[float, str, str, str]] = field(default_factory=list)  # at, id, kind, deal

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                receiver.received.append(
                    (
                        time.monotonic(),
                        self.headers.get("webhook-id", ""),
                        body.get("event", ""),
                        (body.get("data") or {}).get("dealId", ""),
                    )
                )
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Service:
    """`dealbroker migrate`, `serve` and `worker` on the cluster, from this source tree."""

    directory: Path
    database_url: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])]
        )
        # The sandbox (the default environment) may send webhooks to loopback receivers.
        env.update(DEALBROKER_DATABASE_URL=self.database_url, DEALBROKER_ENVIRONMENT="sandbox")
        env.update(DEALBROKER_LOG_LEVEL="warning", DEALBROKER_DEFAULT_LOCALE="en")
        return env

    def start(self) -> tuple[str, dict[str, str]]:
        command = [sys.executable, "-m", "dealbroker"]
        migrated = subprocess.run(
            [*command, "migrate"], env=self.env(), capture_output=True, text=True, check=False
        )
        if migrated.returncode != 0:
            raise Fail(f"dealbroker migrate failed: {migrated.stderr.strip()[-500:]}")
        port = free_port()
        with open(self.directory / "serve.log", "ab") as out:
            serve = subprocess.Popen(
                [*command, "serve", "--port", str(port)],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(serve)
        with open(self.directory / "worker.log", "ab") as out:
            worker = subprocess.Popen(
                [*command, "worker"],
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(worker)
        base = f"http://127.0.0.1:{port}"
        wait_for("dealbroker serve", lambda: httpx.get(f"{base}/readyz", timeout=1).is_success, 60)
        banner = (self.directory / "serve.log").read_text()
        secret = {
            line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
            for line in banner.splitlines()
            if line.strip().startswith(("client id:", "client secret:"))
        }
        answer = httpx.post(
            f"{base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(secret["client id"], secret["client secret"]),
            timeout=30,
        )
        if answer.status_code != 200:
            raise Fail(f"no token: {answer.status_code} {answer.text[:300]}")
        return base, {"Authorization": f"Bearer {answer.json()['access_token']}"}

    def log_lines(self, name: str) -> list[str]:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@dataclass
class Answer:
    sent: float
    done: float
    status: int | str  # the HTTP status, or "no answer"
    deal: str | None = None
    retry_after: str | None = None
    text: str = ""


def load(base: str, headers: dict[str, str], rate: float, seconds: float) -> list[Answer]:
    """Deal creates at a steady `rate` for `seconds`, each with its own Idempotency-Key, sent on
    schedule whether or not earlier ones were answered (an open loop, as real traffic)."""
    answers: list[Answer] = []
    start = time.monotonic()

    def create(client: httpx.Client, i: int) -> None:
        sent = time.monotonic()
        try:
            r = client.post(
                "/deals/v1/deals",
                json={"name": f"Drill {i}", "price": 100, "seller": SELLER},
                headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
            )
        except httpx.HTTPError as exc:
            answers.append(Answer(sent, time.monotonic(), "no answer", text=repr(exc)))
            return
        deal = r.json().get("id") if r.status_code == 201 else None
        answers.append(
            Answer(
                sent,
                time.monotonic(),
                r.status_code,
                deal,
                r.headers.get("retry-after"),
                "" if r.is_success else r.text[:300],
            )
        )

    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    with (
        httpx.Client(base_url=base, timeout=30, limits=limits) as client,
        ThreadPoolExecutor(max_workers=100) as pool,
    ):
        for i in range(int(rate * seconds)):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
            pool.submit(create, client, i)
    return answers


def percentile(values: list[float], p: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))]


def run(args: argparse.Namespace, number: int) -> bool:
    directory = Path(tempfile.mkdtemp(prefix="dealbroker-failover-"))
    cluster = Cluster(directory, synchronous=args.synchronous, archive=args.archive)
    receiver = Receiver()
    service = None
    try:
        say(f"run {number}: starting etcd, 3 PostgreSQL 15 under Patroni, HAProxy")
        cluster.start()
        cluster.psql("postgres", "CREATE DATABASE dealbroker")
        if args.archive:
            took = cluster.start_archive()
            say(f"run {number}: WAL archived by pgBackRest; full backup in {took:.1f} s")
        if args.multi_host:
            hosts = "&".join(f"host=127.0.0.1:{n.pg_port}" for n in cluster.nodes)
            url = (
                f"postgresql+asyncpg://postgres@/dealbroker?{hosts}&target_session_attrs=read-write"
            )
        else:
            url = f"postgresql+asyncpg://postgres@127.0.0.1:{cluster.haproxy_port}/dealbroker"
        service = Service(directory, url)
        base, headers = service.start()
        hook = receiver.start()
        endpoint = httpx.post(
            f"{base}/integrations/v1/webhook-endpoints",
            json={"url": hook},
            headers=headers,
            timeout=30,
        )
        if endpoint.status_code != 201:
            raise Fail(f"webhook endpoint refused: {endpoint.status_code} {endpoint.text[:300]}")
        leader = cluster.leader()
        say(
            f"run {number}: primary {leader}, synchronous_mode {args.synchronous}, service via "
            f"{'a multi-host URL' if args.multi_host else 'HAProxy'}; "
            f"{args.rate:g} creates/s for {args.seconds:g} s"
        )

        t0 = time.monotonic()
        killed: dict[str, float] = {}

        def fault() -> None:
            time.sleep(args.kill_after)
            killed["at"] = time.monotonic()
            cluster.kill(leader, args.fault)
            say(f"run {number}: {args.fault} fault on {leader} at {killed['at'] - t0:.1f} s")
            try:
                killed["leader"] = wait_for(
                    "a new primary",
                    lambda: (
                        (n := cluster.leader())
                        and (n != leader or args.fault == "postmaster")
                        and n
                    ),
                    120,
                    interval=0.1,
                )
                killed["promoted"] = time.monotonic()
            except Fail:
                killed["leader"] = "none within 120 s"

        killer = None
        if not args.no_kill:
            killer = threading.Thread(target=fault, daemon=True)
            killer.start()
        answers = load(base, headers, args.rate, args.seconds)
        if killer is not None:
            killer.join(timeout=130)
        ok = report(args, number, cluster, service, receiver, base, headers, answers, killed)
        if args.archive:
            created = {a.deal for a in answers if a.status == 201}
            ok = restored_from_archive(cluster, created, number) and ok
        return ok
    finally:
        if service is not None:
            service.close()
        cluster.close()
        if receiver.__dict__.get("server"):
            receiver.close()
        if args.logs:
            target = Path(args.logs) / f"run-{number}"
            target.mkdir(parents=True, exist_ok=True)
            for log in directory.glob("*.log"):
                shutil.copy(log, target / log.name)
            for log in directory.glob("pg*/data/log/*"):
                shutil.copy(log, target / f"{log.parent.parent.parent.name}-{log.name}")
        shutil.rmtree(directory, ignore_errors=True)


SUMMARY: list[str] = []  # a line per run, printed again at the end


def restored_from_archive(cluster: Cluster, created: set[str], number: int) -> bool:
    """The archive across the failover: the new primary's WAL is pushed to the repository
    (`pgbackrest check` switches the segment and waits for it), the repository is restored
    into a new data directory to the end of the archive (the backup was taken on the old
    primary, before the fault; recovery follows the new timeline), and that server must hold
    every create acknowledged, before and after the fault."""
    leader = cluster.node(wait_for("a primary", cluster.leader, 60))
    started = time.monotonic()
    cluster.run_backrest(leader, "check")
    shipped = time.monotonic() - started
    target = cluster.directory / "restored"
    target.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(target, "postgres", "postgres")
    started = time.monotonic()
    cluster.run_backrest(leader, f"--pg1-path={target}", "restore")
    port = free_port()
    # The restored directory carries Patroni's configuration of the node it came from: its
    # port, its synchronous standbys and its archive_command are overridden, so the restored
    # server serves alone, waits for no standby and pushes nothing to the repository.
    options = [
        f"-p {port}",
        "-c listen_addresses=127.0.0.1",
        f"-c unix_socket_directories={cluster.directory}",
        "-c archive_mode=off",
        "-c synchronous_standby_names=''",
        "-c primary_conninfo=''",
    ]
    pg_ctl = [
        str(PG_BIN / "pg_ctl"),
        "-D",
        str(target),
        "-l",
        str(cluster.directory / "restored.log"),
    ]
    started_server = subprocess.run(
        as_postgres([*pg_ctl, "-w", "-t", "300", "-o", " ".join(options), "start"]),
        capture_output=True,
        text=True,
        check=False,
        timeout=330,
    )
    if started_server.returncode != 0:
        log = (cluster.directory / "restored.log").read_text(errors="replace")[-1500:]
        say(f"run {number}: the restored server did not start: {started_server.stderr.strip()}")
        say(log)
        return False
    try:

        def query(statement: str) -> list[str]:
            return psql(port, "dealbroker", statement)

        wait_for(
            "the restored server to end its recovery",
            lambda: query("SELECT NOT pg_is_in_recovery()") == ["t"],
            300,
        )
        restored_in = time.monotonic() - started
        kept = set(query("SELECT id FROM deals"))
        timeline = query("SELECT timeline_id FROM pg_control_checkpoint()")
    finally:
        subprocess.run(
            as_postgres([*pg_ctl, "-m", "fast", "stop"]), capture_output=True, check=False
        )
    lost = sorted(created - kept)
    say(
        f"run {number}: the archive across the failover: restored from pgBackRest's repository "
        f"to its end in {restored_in:.1f} s (the new primary's WAL pushed in {shipped:.1f} s), "
        f"timeline {timeline[0] if timeline else '?'}: acknowledged creates missing {len(lost)} "
        f"of {len(created)}"
    )
    if lost:
        say(f"  missing from the archive: {lost[:10]}")
    SUMMARY.append(
        f"run {number}: archive across the failover: missing {len(lost)} of {len(created)}; "
        f"restored in {restored_in:.1f} s"
    )
    return not lost


def report(args, number, cluster, service, receiver, base, headers, answers, killed) -> bool:
    """Print one run's figures; whether it kept everything it acknowledged."""
    ok = True
    gap = float("nan")
    statuses = Counter(a.status for a in answers)
    created = {a.deal for a in answers if a.status == 201}
    say(f"run {number}: answers by status: {dict(sorted(statuses.items(), key=str))}")
    bad = [a for a in answers if a.status == "no answer" or (a.status >= 500 and a.status != 503)]
    bad += [a for a in answers if a.status == 503 and not a.retry_after]
    for a in bad[:5]:
        say(f"  FAILED: {a.status} retry-after={a.retry_after} {a.text}")
    if bad:
        ok = False
    successes = sorted(a.done for a in answers if a.status == 201)
    latencies = [a.done - a.sent for a in answers if a.status == 201]
    if "at" in killed:
        at = killed["at"]
        gaps = [(b - a, a, b) for a, b in zip(successes, successes[1:], strict=False) if b > at]
        gap, last, first = max(gaps) if gaps else (float("nan"),) * 3
        say(
            f"run {number}: recovery time {gap:.1f} s (last 2xx {last - at:+.1f} s from the "
            f"kill, first 2xx after {first - at:+.1f} s); Patroni's new primary "
            f"{killed.get('leader')} at {killed.get('promoted', float('nan')) - at:+.1f} s"
        )
        steady = [a.done - a.sent for a in answers if a.status == 201 and a.sent < at - 1]
    else:
        steady = latencies
    if steady:
        say(
            f"run {number}: create latency before any fault: p50 {percentile(steady, 50) * 1000:.0f}"
            f" ms, p99 {percentile(steady, 99) * 1000:.0f} ms, mean "
            f"{statistics.fmean(steady) * 1000:.0f} ms ({len(steady)} creates)"
        )

    # Every 201 is in the database, read on whatever node is the primary now, and readable
    # through the API (within a minute in all: a service that cannot reach the database
    # answers 503, and the run says so rather than wait for ever).
    stored = set(
        wait_for("the deals", lambda: cluster.psql("dealbroker", "SELECT id FROM deals"), 30)
    )
    lost = sorted(created - stored)
    unread = []
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=base, headers=headers, timeout=10) as client:
        for deal in sorted(created & stored):
            status: int | str = "not asked"
            while time.monotonic() < deadline:
                try:
                    status = client.get(f"/deals/v1/deals/{deal}").status_code
                except httpx.HTTPError:
                    status = "no answer"
                if status == 200:
                    break
                time.sleep(0.2)
            if status != 200:
                unread.append((deal, status))
    say(
        f"run {number}: acknowledged creates lost: {len(lost)} of {len(created)}; "
        f"not readable through the API: {len(unread)}"
    )
    if lost or unread:
        ok = False
        say(f"  lost: {lost[:10]}, unread: {unread[:5]}")

    # Every deal in the database (acknowledged or not: a create may commit and its answer be
    # lost) has its creation's deal.status event delivered; waits up to the worker's lease and
    # more, for a batch whose record was lost in the switch to be sent again.
    def undelivered() -> set[str]:
        return stored - {deal for _, _, kind, deal in receiver.received if kind == "deal.status"}

    deadline = time.monotonic() + args.delivery_wait
    while undelivered() and time.monotonic() < deadline:
        time.sleep(0.5)
    missing = undelivered()
    say(
        f"run {number}: events lost: {len(missing)} of {len(stored)} deals in the database "
        f"({len(stored - created)} stored without a 201)"
    )
    if missing:
        ok = False
    times: dict[str, list[float]] = {}
    for at, event_id, _, _ in receiver.received:
        times.setdefault(event_id, []).append(at)
    duplicates = {i: t for i, t in times.items() if len(t) > 1}
    spans = ", ".join(f"{t[-1] - t[0]:.1f} s" for t in list(duplicates.values())[:10])
    say(
        f"run {number}: events duplicated: {len(duplicates)} of {len(times)}"
        + (f" (second copy after {spans}; the lease is 30 s)" if duplicates else "")
    )
    for name in ("serve", "worker"):
        lines = [
            line
            for line in service.log_lines(name)
            if any(w in line for w in ("failed", "recovered", "Traceback", "Error", "error"))
        ]
        if lines:
            say(f"run {number}: {name}'s log ({len(lines)} lines of failure and recovery):")
            for line in lines[:12]:
                say(f"  {line[:300]}")
        if any("Traceback" in line for line in service.log_lines(name)):
            say(f"run {number}: a traceback in {name}'s log")
            ok = False
    say(f"run {number}: {'passed' if ok else 'FAILED'}")
    p50, p99 = (percentile(steady, 50) * 1000, percentile(steady, 99) * 1000) if steady else (0, 0)
    SUMMARY.append(
        f"run {number}: {'passed' if ok else 'FAILED'}; recovery {gap:.1f} s; "
        f"{dict(sorted(statuses.items(), key=str))}; lost {len(lost)} of {len(created)}; "
        f"events lost {len(missing)}, duplicated {len(duplicates)}; "
        f"p50 {p50:.0f} ms, p99 {p99:.0f} ms before the fault"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/failover-drill", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=1, help="runs, each on a new cluster (1)")
    parser.add_argument("--seconds", type=float, default=60, help="the load's length (60)")
    parser.add_argument("--rate", type=float, default=10, help="creates per second (10)")
    parser.add_argument("--kill-after", type=float, help="seconds into the load (a third of it)")
    parser.add_argument(
        "--fault",
        choices=("machine", "freeze", "postmaster", "stop"),
        default="machine",
        help="machine: SIGKILL Patroni and PostgreSQL (default); postmaster: SIGKILL PostgreSQL "
        "alone; stop: SIGTERM Patroni; freeze: SIGSTOP Patroni and PostgreSQL (a hung machine)",
    )
    parser.add_argument("--no-kill", action="store_true", help="no fault: latency only")
    parser.add_argument(
        "--no-sync", dest="synchronous", action="store_false", help="synchronous_mode off"
    )
    parser.add_argument(
        "--multi-host",
        action="store_true",
        help="reach PostgreSQL by a multi-host URL with target_session_attrs, not HAProxy",
    )
    parser.add_argument(
        "--delivery-wait", type=float, default=75, help="seconds to wait for the events (75)"
    )
    parser.add_argument(
        "--archive",
        action="store_true",
        help="every node archives its WAL to a pgBackRest repository; after the run, the "
        "repository is restored to its end and must hold every acknowledged create",
    )
    parser.add_argument("--logs", help="copy each run's logs into this directory")
    args = parser.parse_args()
    if args.kill_after is None:
        args.kill_after = args.seconds / 3
    needed = ["etcd", "patroni", "haproxy", str(PG_BIN / "postgres")]
    for program in needed + (["pgbackrest"] if args.archive else []):
        if shutil.which(program) is None:
            say(f"failover-drill: {program} is not installed (see docs/operations/failover.md)")
            return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # clean up as on Ctrl-C
    results = []
    try:
        for number in range(1, args.runs + 1):
            results.append(run(args, number))
    except Fail as exc:
        sys.stderr.write(f"failover-drill: {exc}\n")
        return 2
    for line in SUMMARY:
        say(line)
    say(f"failover-drill: {sum(results)} of {len(results)} runs passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
