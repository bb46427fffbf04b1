"""The OpenSSH data path (harness.access.openssh, harness.access.eic_proxy) against a real sshd on
loopback, and through a websocket standing in for the EIC endpoint."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import botocore.session
import pytest
from botocore.stub import Stubber

from harness.access import tunnel as access
from harness.endpoint import Endpoint
from harness.access.openssh import OpenSshForward
from tests.conftest import require_binary
from tests.harness.servers import fake_eic, get_json, http_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _ssh():
    require_binary("ssh")


def _tcp_ticket(ssh_server, key, calls=None):
    def ticket():
        if calls is not None:
            calls.append(time.monotonic())
        return {"key": key, "tcp": ("127.0.0.1", ssh_server["port"])}
    return ticket


def _host_key_line(ssh_server) -> tuple[str, str]:
    name, blob = Path(str(ssh_server["host_key"]) + ".pub").read_text().split()[:2]
    return name, blob


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_forward_reaches_the_server_pins_the_host_key_and_leaves_no_secret(ssh_server, key):
    pins = access.HostKeyPins()
    with http_server() as http_port, OpenSshForward(
            _tcp_ticket(ssh_server, key), username=ssh_server["user"], remote_port=http_port,
            host_id="i-0abc", pins=pins) as fwd:
        assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
        assert pins.get("i-0abc") == _host_key_line(ssh_server)  # first contact: pinned
        # the key file is gone once the session is up; only the pin file stays while it runs
        assert [p.name for p in fwd._dir.iterdir()] == ["known_hosts"]
        pem = access.public_key_line(key).split()[1]
        assert pem not in _cmdline(fwd.proc.pid)
        tmp = fwd._dir
    assert not tmp.exists()
    assert fwd.proc.poll() is not None


def test_a_different_host_key_than_the_pin_is_refused(ssh_server, key):
    pins = access.HostKeyPins()
    other = access.new_ephemeral_key()
    pins.check_blob("i-0abc", other.get_name(), other.get_base64())
    with http_server() as http_port, pytest.raises(access.HostKeyMismatch, match="i-0abc"):
        OpenSshForward(_tcp_ticket(ssh_server, key), username=ssh_server["user"],
                       remote_port=http_port, host_id="i-0abc", pins=pins)


def test_a_refused_login_is_one_access_error_naming_the_host(ssh_server):
    stranger = access.new_ephemeral_key()  # not in authorized_keys
    with http_server() as http_port, pytest.raises(access.AccessError, match="i-0abc.*Permission denied"):
        OpenSshForward(lambda: {"key": stranger, "tcp": ("127.0.0.1", ssh_server["port"])},
                       username=ssh_server["user"], remote_port=http_port, host_id="i-0abc",
                       pins=access.HostKeyPins(), timeout=5)


def test_ssh_exiting_is_redialled_with_a_new_ticket_on_the_same_port(ssh_server, key):
    calls: list[float] = []
    with http_server() as http_port, OpenSshForward(
            _tcp_ticket(ssh_server, key, calls), username=ssh_server["user"], remote_port=http_port,
            host_id="i-0abc", pins=access.HostKeyPins()) as fwd:
        url, first = fwd.base_url, fwd.proc
        first.kill()  # as when EIC closes the tunnel at its time limit
        deadline = time.monotonic() + 30
        while (fwd.proc is first or fwd.reconnects < 1) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fwd.reconnects == 1 and len(calls) == 2
        assert fwd.base_url == url
        assert get_json(url + "/models") == {"path": "/v1/models"}
        assert fwd.error is None


def test_eic_proxy_reads_and_deletes_its_ticket_and_relays(ssh_server, key, tmp_path):
    """ssh with harness.access.eic_proxy as ProxyCommand through a websocket bridged to the sshd: the
    ticket file is gone after use, the URL never in the proxy's argv."""
    with fake_eic(ssh_server["port"]) as eice, http_server() as http_port:
        url = f"ws://127.0.0.1:{eice['port']}/openTunnel?X-Amz-Signature=abc&instanceConnectEndpointId=e"
        with OpenSshForward(lambda: {"key": key, "ws": url}, username=ssh_server["user"],
                            remote_port=http_port, host_id="i-0abc", pins=access.HostKeyPins()) as fwd:
            assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
            assert not list(fwd._dir.glob("ticket-*"))
            assert "X-Amz-Signature" not in _cmdline(fwd.proc.pid)
        assert eice["seen"][0]["X-Amz-Signature"] == ["abc"]


def test_eic_proxy_bad_ticket_is_one_line_and_exit_1(tmp_path):
    ticket = tmp_path / "t"
    ticket.write_text("https://not-a-websocket.example/\n")
    r = subprocess.run([sys.executable, "-m", "harness.access.eic_proxy", str(ticket)], cwd=REPO,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "does not hold a websocket URL" in r.stderr
    assert not ticket.exists()
    r = subprocess.run([sys.executable, "-m", "harness.access.eic_proxy"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("usage:")


def _eic_stubs(s, ssh_server, key, n_keys):
    ec2 = s.create_client("ec2", region_name="us-east-1")
    eic = s.create_client("ec2-instance-connect", region_name="us-east-1")
    ec2_stub, eic_stub = Stubber(ec2), Stubber(eic)
    ec2_stub.add_response("describe_instances", {"Reservations": [{"Instances": [{
        "InstanceId": "i-0123456789abcdef0", "PrivateIpAddress": "10.0.1.23", "VpcId": "vpc-1",
        "SubnetId": "subnet-1", "State": {"Name": "running", "Code": 16}}]}]})
    ec2_stub.add_response("describe_instance_connect_endpoints", {"InstanceConnectEndpoints": [
        {"InstanceConnectEndpointId": "eice-0abc", "SubnetId": "subnet-1",
         "DnsName": "eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com"}]})
    for _ in range(n_keys):
        eic_stub.add_response("send_ssh_public_key", {"Success": True, "RequestId": "r"},
                              {"InstanceId": "i-0123456789abcdef0", "InstanceOSUser": ssh_server["user"],
                               "SSHPublicKey": access.public_key_line(key)})
    return ec2, eic, ec2_stub, eic_stub


def _session():
    s = botocore.session.get_session()
    s.set_credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    s.set_config_variable("region", "us-east-1")
    return s


@pytest.mark.parametrize("ssh_present", [True, False])
def test_eic_tunnel_carries_bytes_with_openssh_and_falls_back_without_it(
        ssh_server, key, monkeypatch, caplog, ssh_present):
    """The whole chain: the paramiko process dials first (control: pin, remote commands), then
    OpenSSH's client through harness.access.eic_proxy carries the forwarded bytes; each dial pushes its
    own key. Without ssh on PATH the paramiko process carries them (one dial, one key)."""
    import harness.access.openssh as topenssh

    s = _session()
    monkeypatch.setattr(access, "new_ephemeral_key", lambda: key)
    if not ssh_present:
        monkeypatch.setattr(topenssh, "find_ssh", lambda: None)
    ec2, eic, ec2_stub, eic_stub = _eic_stubs(s, ssh_server, key, 2 if ssh_present else 1)
    with ec2_stub, eic_stub, http_server() as http_port, fake_eic(ssh_server["port"]) as eice:
        ep = Endpoint("g6", "openai", "m", instance_id="i-0123456789abcdef0", port=http_port)
        rewrite = lambda url: url.replace(  # noqa: E731
            "wss://eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com", f"ws://127.0.0.1:{eice['port']}")
        with access.eic_tunnel(ep, botocore_session=s, region="us-east-1", pins=access.HostKeyPins(),
                               os_user=ssh_server["user"], ec2=ec2, eic=eic, rewrite_url=rewrite) as live:
            assert get_json(live.base_url + "/models") == {"path": "/v1/models"}
            assert access.forwarder_kind(live.base_url) == ("openssh" if ssh_present else "paramiko")
            assert access.forwarder_for(live.base_url).run_remote("echo hi")[1] == b"hi\n"
        eic_stub.assert_no_pending_responses()
        assert len(eice["seen"]) == (2 if ssh_present else 1)
    assert access.forwarder_kind(live.base_url) is None


def test_openssh_that_will_not_start_falls_back_with_one_warning(ssh_server, key, monkeypatch, caplog):
    """ssh present but failing (here: it cannot run at all) -> the paramiko process carries the
    tunnel, and one WARNING line names why."""
    import harness.access.openssh as topenssh

    s = _session()
    monkeypatch.setattr(access, "new_ephemeral_key", lambda: key)
    monkeypatch.setattr(topenssh, "find_ssh", lambda: "/bin/false")
    ec2, eic, ec2_stub, eic_stub = _eic_stubs(s, ssh_server, key, 2)
    with ec2_stub, eic_stub, http_server() as http_port, fake_eic(ssh_server["port"]) as eice:
        ep = Endpoint("g6", "openai", "m", instance_id="i-0123456789abcdef0", port=http_port)
        rewrite = lambda url: url.replace(  # noqa: E731
            "wss://eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com", f"ws://127.0.0.1:{eice['port']}")
        with caplog.at_level("WARNING", logger="harness.access.tunnel"), \
                access.eic_tunnel(ep, botocore_session=s, region="us-east-1", pins=access.HostKeyPins(),
                                  os_user=ssh_server["user"], ec2=ec2, eic=eic, rewrite_url=rewrite) as live:
            assert get_json(live.base_url + "/models") == {"path": "/v1/models"}
            assert access.forwarder_kind(live.base_url) == "paramiko"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "OpenSSH forwarder did not start" in warnings[0]


def test_unknown_forwarder_is_one_access_error():
    ep = Endpoint("g6", "openai", "m", instance_id="i-0123456789abcdef0", port=8000)
    with pytest.raises(access.AccessError, match="forwarder 'fast': one of auto, openssh, paramiko, inprocess"):
        with access.eic_tunnel(ep, botocore_session=_session(), region="us-east-1",
                               pins=access.HostKeyPins(), forwarder="fast"):
            pass


def test_no_aws_variable_reaches_ssh(ssh_server, key, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    with http_server() as http_port, OpenSshForward(
            _tcp_ticket(ssh_server, key), username=ssh_server["user"], remote_port=http_port,
            host_id="i-0abc", pins=access.HostKeyPins()) as fwd:
        env = Path(f"/proc/{fwd.proc.pid}/environ").read_bytes()
        assert b"do-not-leak" not in env and b"AWS_SECRET_ACCESS_KEY" not in env
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "do-not-leak"


# --------------------------------------------------------------------------- review of ae8cd15
_HOLDER = """
import sys, time
import paramiko
from harness.access.hostkeys import HostKeyPins
from harness.access.openssh import OpenSshForward
key = paramiko.Ed25519Key(filename=sys.argv[1])
fwd = OpenSshForward(lambda: {"key": key, "tcp": ("127.0.0.1", int(sys.argv[2]))}, username=sys.argv[3],
                     remote_port=int(sys.argv[4]), host_id="i-0abc", pins=HostKeyPins())
print(fwd.local_port, fwd.proc.pid, fwd._dir, flush=True)
time.sleep(600)
"""


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


def test_ssh_ends_when_the_process_holding_the_tunnel_is_killed(ssh_server, key, tmp_path):
    """A run killed outright (SIGKILL, or SIGTERM, which Python does not unwind) must not leave
    ssh holding the local port and one of the EIC endpoint's 20 connections until the tunnel's
    time limit: ssh's stdin reaches EOF, and without a pty that ends the session."""
    import signal

    from harness.access.process import key_to_pem

    key_file = tmp_path / "k"
    key_file.write_text(key_to_pem(key))
    key_file.chmod(0o600)
    with http_server() as http_port:
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(key_file), str(ssh_server["port"]),
                                   ssh_server["user"], str(http_port)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        ssh_pid, its_dir = None, None
        try:
            port, ssh_pid, its_dir = holder.stdout.readline().split()
            port, ssh_pid = int(port), int(ssh_pid)
            assert get_json(f"http://127.0.0.1:{port}/v1/models") == {"path": "/v1/models"}
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            deadline = time.monotonic() + 10
            while _listening(port) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _listening(port), "ssh outlived the process that opened the tunnel"
        finally:
            holder.kill()
            holder.wait(10)
            holder.stdout.close()
            if ssh_pid:  # the test's own grandchild, if the assertion above failed
                with contextlib.suppress(ProcessLookupError):
                    os.kill(ssh_pid, signal.SIGKILL)
            if its_dir:  # a killed process removes nothing: its known_hosts stays behind
                shutil.rmtree(its_dir, ignore_errors=True)


def test_proxy_command_runs_under_sh_whatever_the_users_shell(ssh_server, key, monkeypatch):
    """ssh runs ProxyCommand as ``$SHELL -c 'exec ...'`` (sshconnect.c ssh_proxy_connect): a
    login shell that is not POSIX (fish) or prints from its rc file must not break the tunnel."""
    monkeypatch.setenv("SHELL", "/bin/false")
    with fake_eic(ssh_server["port"]) as eice, http_server() as http_port:
        url = f"ws://127.0.0.1:{eice['port']}/openTunnel?X-Amz-Signature=abc&instanceConnectEndpointId=e"
        with OpenSshForward(lambda: {"key": key, "ws": url}, username=ssh_server["user"], timeout=5,
                            remote_port=http_port, host_id="i-0abc", pins=access.HostKeyPins()) as fwd:
            assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}


def test_the_session_turns_nagle_off_at_sshd_without_a_pty(key, tmp_path):
    """The fact the session exists for (harness.access.openssh docstring): sshd sets TCP_NODELAY
    for a session's command with no pty (session.c do_exec_no_pty -> ssh_packet_set_interactive
    -> misc.c set_nodelay, whose debug2 line is 'fd N setting TCP_NODELAY'). Read before any
    forwarded connection, for which sshd sets it on its socket to the target as well."""
    from harness.calibration.loopback_sshd import sshd

    log = tmp_path / "sshd.log"
    home = tmp_path / "sshd"
    home.mkdir()
    with sshd(require_binary("/usr/sbin/sshd"), home, access.public_key_line(key), log=log) as srv, \
            OpenSshForward(_tcp_ticket(srv, key), username=srv["user"], remote_port=9, host_id="i-0abc",
                           pins=access.HostKeyPins()):
        deadline = time.monotonic() + 10
        while "TCP_NODELAY" not in log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.1)
        said = log.read_text(errors="replace")
    session = said.split("Starting session: ", 1)[1]
    assert session.startswith("command for ")  # sshd says "command on pts/N for" with a pty
    assert "setting TCP_NODELAY" in session and "direct-tcpip" not in session.split("TCP_NODELAY")[0]


def test_stderr_is_read_while_ssh_runs(tmp_path):
    """ssh's stderr carries the remote command's (no pty) and the ProxyCommand's: read as it
    comes, so a chatty far side cannot block ssh on a full pipe. Stand-in ssh: 1 MB on stderr
    before the marker."""
    fake = tmp_path / "ssh"
    fake.write_text("#!/bin/sh\nhead -c 1000000 /dev/zero | tr '\\0' x >&2\necho kit-tunnel-ready\nexec cat\n")
    fake.chmod(0o755)
    t0 = time.monotonic()
    with OpenSshForward(lambda: {"key": access.new_ephemeral_key(), "tcp": ("127.0.0.1", 22)}, username="u",
                        remote_port=1, host_id="i-0abc", pins=access.HostKeyPins(), ssh=str(fake),
                        timeout=1) as fwd:
        assert fwd.proc.poll() is None
    assert time.monotonic() - t0 < 20


def test_redial_goes_on_past_a_long_outage(ssh_server, key, monkeypatch):
    """The paramiko forwarder redials at every connection, whatever happened before; the OpenSSH
    path retries (capped backoff) until the tunnel closes, not five times and then never."""
    monkeypatch.setattr(OpenSshForward, "RETRY_MAX_S", 0.05, raising=False)
    state = {"fail": 0}

    def ticket():
        if state["fail"]:
            state["fail"] -= 1
            raise access.AccessError("send_ssh_public_key: network is unreachable")
        return {"key": key, "tcp": ("127.0.0.1", ssh_server["port"])}

    with http_server() as http_port, OpenSshForward(
            ticket, username=ssh_server["user"], remote_port=http_port, host_id="i-0abc",
            pins=access.HostKeyPins()) as fwd:
        state["fail"] = 8
        fwd.proc.kill()
        deadline = time.monotonic() + 60
        while fwd.reconnects < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fwd.reconnects == 1 and state["fail"] == 0 and fwd.error is None
        assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}


def test_an_unsafe_temporary_directory_is_not_handed_to_ssh(ssh_server, key, monkeypatch, tmp_path):
    """ssh expands %-tokens and ${VAR} in the key and known_hosts paths and splits
    UserKnownHostsFile on whitespace (ssh_config(5)): such a TMPDIR is passed over for /tmp."""
    odd = tmp_path / "a b%d"
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    with http_server() as http_port, OpenSshForward(
            _tcp_ticket(ssh_server, key), username=ssh_server["user"], remote_port=http_port,
            host_id="i-0abc", pins=access.HostKeyPins()) as fwd:
        assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
        assert fwd._dir.parent == Path("/tmp")


def test_eic_proxy_frames_are_no_larger_than_the_aws_clis(tmp_path):
    """awscli's Websocket._MAX_BYTES_PER_FRAME = 65_000 (awscli/customizations/ec2instanceconnect/
    websocket.py): the largest frame the CLI sends EIC; a read from ssh can be larger."""
    import socket

    from websockets.sync.server import serve

    from harness.access.eic_proxy import relay

    sizes: list[int] = []
    got = bytearray()

    def handler(ws):
        for msg in ws:
            sizes.append(len(msg))
            got.extend(msg)

    payload = os.urandom(200_000)
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    a.sendall(payload)
    a.shutdown(socket.SHUT_WR)
    server = serve(handler, "127.0.0.1", 0, compression=None, max_size=None)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        rc = relay(f"ws://127.0.0.1:{server.socket.getsockname()[1]}/openTunnel",
                   stdin_fd=b.fileno(), stdout_fd=os.open(os.devnull, os.O_WRONLY))
    finally:
        server.shutdown()
        t.join(5)
        a.close()
        b.close()
    assert rc == 0 and bytes(got) == payload
    assert max(sizes) <= 65_000 and len(sizes) >= 4


def test_eic_proxy_never_prints_the_presigned_url(tmp_path):
    """websockets' InvalidURI quotes the URL; ssh prints the proxy's stderr and the kit logs it
    (and meta.json records the access error): the signature and key id must not be there."""
    ticket = tmp_path / "t"
    ticket.write_text("ws:///openTunnel?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=s3cr3t\n")
    r = subprocess.run([sys.executable, "-m", "harness.access.eic_proxy", str(ticket)], cwd=REPO,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "InvalidURI" in r.stderr
    assert "s3cr3t" not in r.stderr and "AKIDEXAMPLE" not in r.stderr

