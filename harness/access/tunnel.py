"""Reach a model server on a private EC2 instance with no inbound port: an EC2 Instance Connect
Endpoint (EIC) websocket carrying SSH, then a paramiko ``direct-tcpip`` channel to the server.

Chain, all pure Python (no AWS CLI, no session-manager-plugin, no open port):

1. ``describe_instances`` gives the private IP, VPC and subnet; the instance's EIC endpoint is
   found the way the AWS CLI does (same subnet first, else the first in the VPC).
2. An ephemeral ed25519 key is pushed with ``ec2-instance-connect send_ssh_public_key`` (valid
   60 s, for one OS user; never written to disk).
3. ``wss://<eice-dns>/openTunnel?...`` is presigned with botocore's ``RequestSigner`` exactly as
   ``aws ec2-instance-connect open-tunnel`` does (awscli/customizations/ec2instanceconnect/
   eicesigner.py: service ``ec2-instance-connect``, SigV4 query string, 60 s expiry) and opened
   with the ``websockets`` sync client; SSH bytes travel as binary frames.
4. paramiko runs SSH over that websocket (a socketpair bridge), authenticates with the key,
   holds one pty session open (so sshd turns Nagle off, see ``_mark_interactive``) and opens
   one ``direct-tcpip`` channel per local connection to 127.0.0.1:<port> on the instance.
5. A forwarder listening on 127.0.0.1:<ephemeral> exposes the server as ``http://127.0.0.1:N/v1``.
   If the tunnel drops (EIC's 3600 s cap), the next connection redials steps 2-4.
   ``eic_tunnel`` runs steps 3-5 in a process of its own (``harness.access.process``: the SSH work
   must not take the load generator's GIL); steps 1-2 and the URL signing stay in this process,
   so AWS credentials never reach the child. Where OpenSSH's ``ssh`` is installed, a second
   connection made by it carries the forwarded bytes (``harness.access.openssh``, with
   ``harness.access.eic_proxy`` as its ProxyCommand): the same work in C, about half the CPU per chunk;
   the paramiko process then pins the host key and runs remote commands.

Host keys: EIC gives no known_hosts entry to check against, and the websocket itself is TLS to an
AWS endpoint authenticated by SigV4, which connects only to the private IP inside the VPC. The
host key the instance presents first is pinned for the rest of the run (``HostKeyPins``); a
different key on a later connection to the same instance aborts. Nothing is ever added to the
user's ``~/.ssh/known_hosts``.

Everything is a context manager: the forwarder, the SSH transport and the websocket close when
the run ends, on an error, and on Ctrl-C.
"""
from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import threading
from typing import Any, Callable, Iterator
from urllib.parse import urlencode

import paramiko

from harness.access.eic_proxy import FRAME_BYTES, redact
from harness.endpoint import Endpoint
from harness.access.hostkeys import AccessError, HostKeyMismatch, HostKeyPins

log = logging.getLogger(__name__)

DEFAULT_OS_USER = "ubuntu"  # the GPU and Neuron DLAMIs are Ubuntu
MAX_TUNNEL_SECONDS = 3600  # EIC's upper bound for maxTunnelDuration
_FRAME = FRAME_BYTES  # bytes per websocket frame at most, as the AWS CLI sends (harness.access.eic_proxy)
_EICE_STATES = ["create-complete", "update-in-progress", "update-failed", "update-complete"]


# --------------------------------------------------------------------------- presigned URL
def presign_open_tunnel(botocore_session: Any, region: str, eice_dns: str, eice_id: str,
                        private_ip: str, remote_port: int = 22,
                        max_tunnel_duration: int | None = MAX_TUNNEL_SECONDS,
                        expires_in: int = 60) -> str:
    """The presigned ``wss://<eice_dns>/openTunnel`` URL, built as the AWS CLI builds it."""
    from botocore.signers import RequestSigner

    model = botocore_session.get_service_model("ec2-instance-connect")
    signer = RequestSigner(model.service_id, region, model.signing_name, model.signature_version,
                           botocore_session.get_credentials(),
                           botocore_session.get_component("event_emitter"))
    qs: dict[str, Any] = {"instanceConnectEndpointId": eice_id, "remotePort": remote_port,
                          "privateIpAddress": private_ip}
    if max_tunnel_duration:
        qs["maxTunnelDuration"] = max_tunnel_duration
    request = {"url": f"wss://{eice_dns}/openTunnel?{urlencode(qs)}", "body": {},
               "headers": {"host": eice_dns}, "method": "GET", "query_string": "",
               "url_path": "/", "context": {}}
    return signer.generate_presigned_url(request_dict=request, operation_name="openTunnel",
                                         expires_in=expires_in)


def find_eice(ec2: Any, vpc_id: str, subnet_id: str | None) -> dict[str, Any]:
    """The EIC endpoint for an instance: one in its subnet, else the first in its VPC."""
    found: list[dict[str, Any]] = []
    pages = ec2.get_paginator("describe_instance_connect_endpoints").paginate(
        Filters=[{"Name": "state", "Values": _EICE_STATES}, {"Name": "vpc-id", "Values": [vpc_id]}])
    for page in pages:
        for eice in page.get("InstanceConnectEndpoints", []):
            if eice.get("SubnetId") == subnet_id:
                return eice
            found.append(eice)
    if not found:
        raise AccessError(f"no EC2 Instance Connect Endpoint in {vpc_id} (deploy the NetworkStack)")
    return found[0]


# --------------------------------------------------------------------------- keys, host keys
def new_ephemeral_key() -> paramiko.Ed25519Key:
    """A fresh ed25519 key, in memory only (paramiko cannot generate ed25519 itself)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    return paramiko.Ed25519Key(file_obj=io.StringIO(pem.decode()))


def public_key_line(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.get_base64()} inference-kit-ephemeral"


def _nodelay(sock: Any) -> None:
    """Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm meets delayed
    ACKs and holds a chunk back ~40 ms, which would show up as inter-token latency."""
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


# --------------------------------------------------------------------------- websocket bridge
class WebsocketBridge:
    """A socket for paramiko whose bytes travel as binary frames over a websocket.

    A socketpair: paramiko owns one end; two threads copy between the other end and the websocket.
    """

    def __init__(self, url: str, *, open_timeout: float = 15.0, user_agent: str | None = None) -> None:
        from websockets.sync.client import connect

        try:
            # No websocket pings (EIC tunnels carry SSH, whose keepalives keep them busy), no
            # compression (SSH bytes are encrypted), no frame size cap.
            self._ws = connect(url, open_timeout=open_timeout, ping_interval=None, compression=None,
                               max_size=None, user_agent_header=user_agent or "inference-kit")
        except Exception as exc:  # noqa: BLE001 - one line naming the step
            raise AccessError(f"could not open the EIC websocket: {type(exc).__name__}: "
                              f"{redact(str(exc), url)}") from None  # the cause would quote the URL
        _nodelay(getattr(self._ws, "socket", None))
        self.sock, self._peer = socket.socketpair()
        self.error: str | None = None
        self._threads = [threading.Thread(target=self._ws_to_sock, daemon=True),
                         threading.Thread(target=self._sock_to_ws, daemon=True)]
        for t in self._threads:
            t.start()

    def _ws_to_sock(self) -> None:
        try:
            for message in self._ws:
                if isinstance(message, str):  # EIC sends only binary; text means an error
                    self.error = f"unexpected text frame: {message[:200]}"
                    break
                self._peer.sendall(message)
        except Exception as exc:  # noqa: BLE001 - e.g. EIC closing with a reason (tunnel expired)
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        finally:
            if self.error:
                log.warning("EIC websocket closed: %s", self.error)
            with contextlib.suppress(OSError):
                self._peer.shutdown(socket.SHUT_WR)

    def _sock_to_ws(self) -> None:
        try:
            while True:
                data = self._peer.recv(_FRAME)
                if not data:
                    break
                self._ws.send(data)
        except Exception as exc:  # noqa: BLE001
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        finally:
            with contextlib.suppress(Exception):
                self._ws.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()
        for s in (self.sock, self._peer):
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> "WebsocketBridge":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- SSH + forwarder
def _mark_interactive(transport: paramiko.Transport, host_id: str) -> paramiko.Channel | None:
    """Hold a pty session running ``cat`` for the life of the transport.

    OpenSSH's sshd (before 10.1) sets TCP_NODELAY on its connection only once a session runs a
    command (pty or not: session.c ``do_exec_*`` -> packet.c ``ssh_packet_set_interactive``);
    a forwarding-only connection keeps Nagle's algorithm on, and every small streamed chunk
    then waits for the client's delayed ACK. Measured through a loopback sshd at 16
    streams (python -m harness.calibration.tunnel): inter-token latency p99 55 ms without this,
    15 ms with it (12 ms direct). ``cat`` reads the idle pty and exits on hang-up when the
    transport closes. If the server refuses (a ForceCommand, no shell), the tunnel still works.
    """
    try:
        chan = transport.open_session(timeout=10)
        chan.get_pty()
        chan.exec_command("cat")
        return chan
    except Exception as exc:  # noqa: BLE001 - an optimisation, never a reason to fail
        log.warning("%s: no interactive session (%s); streamed chunks may be delayed by Nagle", host_id, exc)
        return None


class _Relay(threading.Thread):
    """Copies bytes between local connections and their SSH channels, all in one thread.

    One selector over every socket and channel instead of a thread per connection: at 64
    streams the per-thread wake-ups and GIL hand-offs cost more than the copying itself.
    """

    def __init__(self, closing: threading.Event) -> None:
        super().__init__(daemon=True, name="ssh-relay")
        self._closing = closing
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: queue.SimpleQueue = queue.SimpleQueue()

    def add(self, conn: socket.socket, chan: paramiko.Channel) -> None:
        # A stalled local reader may hold the relay at most this long before its pair is dropped.
        conn.settimeout(10)
        self._new.put((conn, chan))
        self.wake()

    def wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _drop(self, conn: socket.socket, chan: paramiko.Channel) -> None:
        for obj in (conn, chan):
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(obj)
        # A transport that died under us makes paramiko raise EOFError from close(): the pair is
        # gone either way, and the relay must keep serving the other pairs.
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            chan.close()
        conn.close()

    def run(self) -> None:
        pairs: list[tuple[socket.socket, paramiko.Channel]] = []
        try:
            while not self._closing.is_set():
                for key, _ in self._sel.select(timeout=0.5):
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        while not self._new.empty():
                            conn, chan = self._new.get()
                            pairs.append((conn, chan))
                            self._sel.register(conn, selectors.EVENT_READ, (conn, chan, True))
                            self._sel.register(chan, selectors.EVENT_READ, (conn, chan, False))
                        continue
                    conn, chan, upstream = key.data
                    try:
                        data = conn.recv(65536) if upstream else chan.recv(65536)
                        if not data:
                            self._drop(conn, chan)
                        elif upstream:
                            chan.sendall(data)
                        else:
                            conn.sendall(data)
                    except (OSError, EOFError, paramiko.SSHException):
                        self._drop(conn, chan)
        finally:
            for conn, chan in pairs:
                self._drop(conn, chan)
            for s in (self._wake_r, self._wake_w):
                s.close()
            self._sel.close()


# What the forwarder dials, again after a tunnel drops: (socket carrying SSH, the key to
# authenticate with, a function closing what carries the socket).
Dial = Callable[[], "tuple[Any, paramiko.PKey, Callable[[], None]]"]


class SshForward:
    """SSH over what ``dial`` returns, then a local 127.0.0.1 listener whose connections become
    direct-tcpip channels to ``remote_host:remote_port`` on the far side.

    When the SSH transport has died (EIC ends a tunnel after ``maxTunnelDuration``, a network
    blip), the next local connection dials again: a new key, a new websocket, the same pinned
    host key. Connections already open on the dead transport fail and are recorded by their user.
    """

    def __init__(self, dial: Dial, *, username: str, remote_port: int, host_id: str,
                 pins: HostKeyPins, remote_host: str = "127.0.0.1", timeout: float = 20.0,
                 keepalive: int = 30) -> None:
        self.remote = (remote_host, remote_port)
        self._dial, self._username, self._host_id, self._pins = dial, username, host_id, pins
        self._timeout, self._keepalive = timeout, keepalive
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.reconnects = 0
        self.session: paramiko.Channel | None = None  # the pty session that turns Nagle off
        self.transport, self._close_carrier = self._connect()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.local_port = self._listener.getsockname()[1]
        self._relay = _Relay(self._closing)
        self._relay.start()
        self._threads.append(self._relay)
        self._spawn(self._accept_loop)

    def _connect(self) -> tuple[paramiko.Transport, Callable[[], None]]:
        sock, pkey, close_carrier = self._dial()
        _nodelay(sock)
        transport = paramiko.Transport(sock)
        self._tune(transport)
        try:
            transport.start_client(timeout=self._timeout)
            self._pins.check(self._host_id, transport.get_remote_server_key())
            transport.auth_publickey(self._username, pkey)
            transport.set_keepalive(self._keepalive)
            self.session = _mark_interactive(transport, self._host_id)
        except BaseException as exc:  # close what was opened, also on Ctrl-C, then say why
            transport.close()
            close_carrier()
            if isinstance(exc, HostKeyMismatch) or not isinstance(exc, Exception):
                raise
            raise AccessError(f"SSH to {self._host_id} failed: {type(exc).__name__}: {exc}") from exc
        return transport, close_carrier

    def _live_transport(self) -> paramiko.Transport:
        with self._lock:
            if not self.transport.is_active() and not self._closing.is_set():
                log.warning("tunnel to %s dropped; reconnecting", self._host_id)
                self.transport.close()
                self._close_carrier()
                self.transport, self._close_carrier = self._connect()
                self.reconnects += 1
            return self.transport

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}/v1"

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                conn, addr = self._listener.accept()
            except OSError:
                return
            _nodelay(conn)
            try:
                chan = self._live_transport().open_channel("direct-tcpip", self.remote, addr, timeout=15)
            except Exception as exc:  # noqa: BLE001 - the client sees a closed connection
                log.warning("direct-tcpip to %s:%s refused: %s", *self.remote, exc)
                conn.close()
                continue
            self._attach(conn, chan)

    def _attach(self, conn: socket.socket, chan: paramiko.Channel) -> None:
        """Start copying between a local connection and its channel (the relay thread)."""
        self._relay.add(conn, chan)

    def _tune(self, transport: paramiko.Transport) -> None:
        """Adjust a new transport before its handshake (a hook; the forwarder process uses it)."""

    def run_remote(self, command: str, stdin: bytes = b"", *, on_stderr: Callable[[bytes], None] | None = None,
                   cancel: threading.Event | None = None, keep_stdin_open: bool = False) -> tuple[int, bytes]:
        """(exit status, stdout) of ``command`` on the far side, over this tunnel's SSH connection
        (``harness.access.remote_exec``; used by ``--bench-from instance``)."""
        from harness.access.remote_exec import run_on_transport

        return run_on_transport(self._live_transport(), command, stdin, on_stderr=on_stderr, cancel=cancel,
                                keep_stdin_open=keep_stdin_open)

    def close(self) -> None:
        self._closing.set()
        if self._listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone does not on Linux.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._listener.close()
        self._relay.wake()
        with self._lock:
            self.transport.close()
            self._close_carrier()
        for t in self._threads:
            t.join(2)

    def __enter__(self) -> "SshForward":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------------------- open tunnels
# The forwarder behind each live tunnel's local base URL, for what runs over the same SSH
# connection besides the forward (``--bench-from instance``). Filled while a tunnel is open.
_OPEN: dict[str, Any] = {}


_KIND: dict[str, str] = {}  # base_url -> which forwarder carries its bytes (FORWARDERS)

# What carries a tunnel's bytes: "openssh" (OpenSSH's ssh -L, harness.access.openssh, with the
# paramiko process as control connection), "paramiko" (harness.access.process alone), "inprocess"
# (paramiko in the load generator's threads: the old path, for the tunnel measurement), "auto"
# (openssh where ssh is installed, else paramiko).
FORWARDERS = ("auto", "openssh", "paramiko", "inprocess")


@contextlib.contextmanager
def registered(base_url: str, forwarder: Any, kind: str = "paramiko") -> Iterator[None]:
    """Make ``forwarder`` (with ``run_remote``) known as the tunnel behind ``base_url``."""
    _OPEN[base_url] = forwarder
    _KIND[base_url] = kind
    try:
        yield
    finally:
        _OPEN.pop(base_url, None)
        _KIND.pop(base_url, None)


def forwarder_kind(base_url: str | None) -> str | None:
    """Which forwarder carries the open tunnel behind ``base_url`` (None: no tunnel)."""
    return _KIND.get(base_url or "")


def forwarder_for(base_url: str | None) -> Any | None:
    """The open tunnel's forwarder behind ``base_url`` (None: not reached through a tunnel)."""
    return _OPEN.get(base_url or "")


# --------------------------------------------------------------------------- the whole chain
@contextlib.contextmanager
def eic_tunnel(endpoint: Endpoint, *, botocore_session: Any, region: str, pins: HostKeyPins,
               os_user: str = DEFAULT_OS_USER, max_tunnel_duration: int = MAX_TUNNEL_SECONDS,
               ec2: Any = None, eic: Any = None,
               rewrite_url: Callable[[str], str] | None = None,
               forwarder: str = "auto") -> Iterator[Endpoint]:
    """Yield ``endpoint`` with ``base_url`` pointing at a local forward to its model server.

    The forwarder never runs in the load generator's process (``FORWARDERS``): by default
    OpenSSH's client carries the bytes (``harness.access.openssh``) beside the paramiko process
    that pins the host key and runs remote commands (``harness.access.process``); without ``ssh``,
    or if it will not start, the paramiko process carries them too (one WARNING line says why).
    ``ec2``/``eic`` clients and ``rewrite_url`` (wss URL -> what to dial) are seams for tests.
    """
    if forwarder not in FORWARDERS:
        raise AccessError(f"forwarder {forwarder!r}: one of {', '.join(FORWARDERS)}")
    if not endpoint.instance_id or not endpoint.port:
        raise AccessError(f"{endpoint.name}: no InstanceId/Port in the stack outputs")
    ec2 = ec2 or botocore_session.create_client("ec2", region_name=region)
    eic = eic or botocore_session.create_client("ec2-instance-connect", region_name=region)
    try:
        reservations = ec2.describe_instances(InstanceIds=[endpoint.instance_id])["Reservations"]
        inst = reservations[0]["Instances"][0]
    except Exception as exc:
        raise AccessError(f"{endpoint.name}: describe_instances {endpoint.instance_id}: {exc}") from exc
    state = inst.get("State", {}).get("Name")
    if state != "running":
        raise AccessError(f"{endpoint.name}: instance {endpoint.instance_id} is {state} "
                          "(idle stop? start it with aws ec2 start-instances)")
    eice = find_eice(ec2, inst["VpcId"], inst.get("SubnetId"))
    # As the AWS CLI does: the FIPS name when the session asks for FIPS endpoints.
    dns = eice.get("FipsDnsName") if botocore_session.get_config_variable("use_fips_endpoint") else eice["DnsName"]
    if not dns:
        raise AccessError(f"{endpoint.name}: FIPS endpoints requested but the EIC endpoint has no FipsDnsName")

    def ticket() -> dict:
        # A fresh key each time: a pushed key is valid for 60 s only. With the forwarder in its
        # own process this runs here, in the load generator's process, at each dial of the
        # child: the AWS calls use this process's botocore session (credentials it refreshes);
        # the child gets only the presigned URL and the ephemeral key (harness/access/process.py).
        key = new_ephemeral_key()
        try:
            eic.send_ssh_public_key(InstanceId=endpoint.instance_id, InstanceOSUser=os_user,
                                    SSHPublicKey=public_key_line(key))
        except Exception as exc:
            raise AccessError(f"{endpoint.name}: send_ssh_public_key: {exc}") from exc
        url = presign_open_tunnel(botocore_session, region, dns, eice["InstanceConnectEndpointId"],
                                  inst["PrivateIpAddress"], 22, max_tunnel_duration)
        return {"key": key, "ws": rewrite_url(url) if rewrite_url else url}

    if forwarder == "inprocess":
        def dial() -> tuple[Any, paramiko.PKey, Callable[[], None]]:
            t = ticket()
            bridge = WebsocketBridge(t["ws"])
            return bridge.sock, t["key"], bridge.close

        with SshForward(dial, username=os_user, remote_port=endpoint.port, host_id=endpoint.instance_id,
                        pins=pins) as fwd, registered(fwd.base_url, fwd):
            yield endpoint.with_base_url(fwd.base_url)
        return

    from harness.access.process import ProcessForward

    # Two SSH connections per instance with the OpenSSH data path (this control one and ssh's):
    # 8 for four EC2 backends, within "Each EC2 Instance Connect Endpoint can support up to 20
    # concurrent connections" (EC2 User Guide, connect-using-eice.html, Limitations). Each ssh
    # ends with this process (harness.access.openssh), so an aborted run leaves none holding one.
    with ProcessForward(ticket, username=os_user, remote_port=endpoint.port,
                        host_id=endpoint.instance_id, pins=pins) as pfwd, contextlib.ExitStack() as stack:
        url, kind = pfwd.base_url, "paramiko"
        if forwarder in ("auto", "openssh"):
            from harness.access.openssh import OpenSshForward, find_ssh

            if find_ssh() or forwarder == "openssh":
                try:
                    ofwd = stack.enter_context(OpenSshForward(
                        ticket, username=os_user, remote_port=endpoint.port,
                        host_id=endpoint.instance_id, pins=pins))
                    url, kind = ofwd.base_url, "openssh"
                except HostKeyMismatch:
                    raise
                except AccessError as exc:
                    if forwarder == "openssh":
                        raise
                    log.warning("%s: OpenSSH forwarder did not start (%s); the paramiko "
                                "process carries the tunnel", endpoint.name, exc)
        stack.enter_context(registered(url, pfwd, kind))
        yield endpoint.with_base_url(url)
