"""The port-less access path against a real OpenSSH server on loopback."""
from __future__ import annotations

import datetime
import socket
from urllib.parse import parse_qs, urlparse

import botocore.session
import pytest
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.stub import Stubber

from harness.access import tunnel as access
from harness.endpoint import Endpoint
from tests.harness.servers import fake_eic, get_json, http_server

FIXED = datetime.datetime(2026, 11, 29, 12, 0, 0)


def _dial(port, key):
    return lambda: (socket.create_connection(("127.0.0.1", port)), key, lambda: None)


def _bc_session():
    s = botocore.session.get_session()
    s.set_credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    s.set_config_variable("region", "us-east-1")
    return s


def test_ssh_forward_reaches_http_server_through_real_sshd(ssh_server, key):
    with http_server() as http_port:
        pins = access.HostKeyPins()
        with access.SshForward(_dial(ssh_server["port"], key), username=ssh_server["user"],
                               remote_port=http_port, host_id="i-test", pins=pins) as fwd:
            assert fwd.base_url.startswith("http://127.0.0.1:")
            # the pty session that makes sshd set TCP_NODELAY is open and its `cat` still runs
            assert fwd.session is not None and not fwd.session.exit_status_ready()
            # Several connections, each its own direct-tcpip channel over one transport.
            for i in range(3):
                assert get_json(f"http://127.0.0.1:{fwd.local_port}/v1/models?n={i}") == {"path": f"/v1/models?n={i}"}
            port = fwd.local_port
        # Closed with the context: nothing listens on the local port any more.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        assert pins.get("i-test")[0] == "ssh-ed25519"


def test_host_key_pinned_within_run(ssh_server, key):
    pins = access.HostKeyPins()
    pins._pins["i-test"] = ("ssh-ed25519", "AAAAsomeotherkey")
    with pytest.raises(access.HostKeyMismatch, match="changed during the run"):
        access.SshForward(_dial(ssh_server["port"], key), username=ssh_server["user"], remote_port=1,
                          host_id="i-test", pins=pins)


def test_wrong_key_is_rejected(ssh_server):
    with pytest.raises(access.AccessError, match="SSH to i-test failed"):
        access.SshForward(_dial(ssh_server["port"], access.new_ephemeral_key()), username=ssh_server["user"],
                          remote_port=1, host_id="i-test", pins=access.HostKeyPins())


def test_dropped_tunnel_redials_with_the_same_pinned_host_key(ssh_server, key):
    dials = []

    def dial():
        dials.append(1)
        return socket.create_connection(("127.0.0.1", ssh_server["port"])), key, lambda: None

    with http_server() as http_port:
        with access.SshForward(dial, username=ssh_server["user"], remote_port=http_port,
                               host_id="i-test", pins=access.HostKeyPins()) as fwd:
            assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
            fwd.transport.close()  # as when EIC ends the tunnel
            assert get_json(fwd.base_url + "/models") == {"path": "/v1/models"}
            assert fwd.reconnects == 1 and len(dials) == 2


def test_presigned_url_matches_botocore_signer(monkeypatch):
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: FIXED)
    url = access.presign_open_tunnel(_bc_session(), "us-east-1", "eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com",
                                     "eice-0abc", "10.0.1.23", 22, 3600)
    u = urlparse(url)
    q = parse_qs(u.query)
    assert (u.scheme, u.path) == ("wss", "/openTunnel")
    assert q["instanceConnectEndpointId"] == ["eice-0abc"] and q["remotePort"] == ["22"]
    assert q["privateIpAddress"] == ["10.0.1.23"] and q["maxTunnelDuration"] == ["3600"]
    assert q["X-Amz-Credential"] == ["AKIDEXAMPLE/20261129/us-east-1/ec2-instance-connect/aws4_request"]
    assert q["X-Amz-Expires"] == ["60"] and q["X-Amz-Date"] == ["20261129T120000Z"]
    # Independent signature: botocore's SigV4 query signer over the same GET request.
    req = AWSRequest("GET", "wss://eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com/openTunnel"
                            "?instanceConnectEndpointId=eice-0abc&remotePort=22&privateIpAddress=10.0.1.23"
                            "&maxTunnelDuration=3600",
                     headers={"host": "eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com"})
    SigV4QueryAuth(Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                   "ec2-instance-connect", "us-east-1", expires=60).add_auth(req)
    expected = parse_qs(urlparse(req.url).query)
    assert q["X-Amz-Signature"] == expected["X-Amz-Signature"]
    assert len(q["X-Amz-Signature"][0]) == 64


def test_eic_tunnel_end_to_end_through_websocket(ssh_server, key, monkeypatch):
    """The whole chain with AWS replaced at its edges: stubbed EC2 / EIC API calls, a websocket
    server standing in for the EIC endpoint, the real sshd behind it."""
    s = _bc_session()
    ec2 = s.create_client("ec2", region_name="us-east-1")
    eic = s.create_client("ec2-instance-connect", region_name="us-east-1")
    monkeypatch.setattr(access, "new_ephemeral_key", lambda: key)
    with Stubber(ec2) as ec2_stub, Stubber(eic) as eic_stub, http_server() as http_port, \
            fake_eic(ssh_server["port"]) as eice:
        ec2_stub.add_response("describe_instances", {"Reservations": [{"Instances": [{
            "InstanceId": "i-0123456789abcdef0", "PrivateIpAddress": "10.0.1.23", "VpcId": "vpc-1",
            "SubnetId": "subnet-1", "State": {"Name": "running", "Code": 16}}]}]},
            {"InstanceIds": ["i-0123456789abcdef0"]})
        ec2_stub.add_response("describe_instance_connect_endpoints", {"InstanceConnectEndpoints": [
            {"InstanceConnectEndpointId": "eice-other", "SubnetId": "subnet-9", "DnsName": "other.example"},
            {"InstanceConnectEndpointId": "eice-0abc", "SubnetId": "subnet-1",
             "DnsName": "eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com"}]})
        eic_stub.add_response("send_ssh_public_key", {"Success": True, "RequestId": "r"},
                              {"InstanceId": "i-0123456789abcdef0", "InstanceOSUser": ssh_server["user"],
                               "SSHPublicKey": access.public_key_line(key)})
        ep = Endpoint("g6", "openai", "m", instance_id="i-0123456789abcdef0", port=http_port)
        rewrite = lambda url: url.replace(  # noqa: E731
            "wss://eice-0abc.ec2-instance-connect-endpoint.us-east-1.amazonaws.com", f"ws://127.0.0.1:{eice['port']}")
        with access.eic_tunnel(ep, botocore_session=s, region="us-east-1", pins=access.HostKeyPins(),
                               os_user=ssh_server["user"], ec2=ec2, eic=eic, rewrite_url=rewrite,
                               forwarder="paramiko") as live:
            assert live.base_url.startswith("http://127.0.0.1:")
            assert get_json(live.base_url + "/models") == {"path": "/v1/models"}
        ec2_stub.assert_no_pending_responses()
        eic_stub.assert_no_pending_responses()
        q = eice["seen"][0]
        assert q["instanceConnectEndpointId"] == ["eice-0abc"] and q["privateIpAddress"] == ["10.0.1.23"]


def test_eic_tunnel_refuses_stopped_instance():
    s = _bc_session()
    ec2 = s.create_client("ec2", region_name="us-east-1")
    with Stubber(ec2) as stub:
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [{
            "InstanceId": "i-0123456789abcdef0", "State": {"Name": "stopped", "Code": 80}}]}]})
        ep = Endpoint("g6", "openai", "m", instance_id="i-0123456789abcdef0", port=8000)
        with pytest.raises(access.AccessError, match="is stopped"):
            with access.eic_tunnel(ep, botocore_session=s, region="us-east-1",
                                   pins=access.HostKeyPins(), ec2=ec2, eic=object()):
                pass


def test_eic_refusal_surfaces_as_access_error(ssh_server, key):
    """An endpoint that closes the websocket with a reason (as EIC does for a bad signature or
    an expired tunnel): SSH fails with one AccessError and the reason is kept on the bridge."""
    with fake_eic(ssh_server["port"]) as eice:
        bridges = []

        def dial():
            b = access.WebsocketBridge(f"ws://127.0.0.1:{eice['port']}/openTunnel?instanceConnectEndpointId=x")
            bridges.append(b)
            return b.sock, key, b.close

        with pytest.raises(access.AccessError, match="SSH to i-test failed"):
            access.SshForward(dial, username=ssh_server["user"], remote_port=1, host_id="i-test",
                              pins=access.HostKeyPins(), timeout=5)
    assert "not a presigned openTunnel request" in (bridges[0].error or "")


def test_websocket_that_cannot_open_is_one_access_error():
    with pytest.raises(access.AccessError, match="could not open the EIC websocket"):
        access.WebsocketBridge(f"ws://127.0.0.1:{_free()}/openTunnel", open_timeout=2)


def _free():
    from tests.harness.servers import free_port
    return free_port()


def test_many_concurrent_connections_through_one_relay(ssh_server, key):
    from concurrent.futures import ThreadPoolExecutor

    with http_server() as http_port, \
            access.SshForward(_dial(ssh_server["port"], key), username=ssh_server["user"],
                              remote_port=http_port, host_id="i-test", pins=access.HostKeyPins()) as fwd:
        # A client that connects and leaves without a word must not disturb the others.
        socket.create_connection(("127.0.0.1", fwd.local_port)).close()
        with ThreadPoolExecutor(24) as pool:
            got = list(pool.map(lambda i: get_json(f"{fwd.base_url}/models?i={i}"), range(48)))
    assert got == [{"path": f"/v1/models?i={i}"} for i in range(48)]


def test_websocket_bridge_error_never_quotes_the_presigned_url():
    with pytest.raises(access.AccessError) as e:
        access.WebsocketBridge("ws:///openTunnel?X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=s3cr3t")
    assert "InvalidURI" in str(e.value) and "s3cr3t" not in str(e.value) and "AKIDEXAMPLE" not in str(e.value)
    assert e.value.__cause__ is None
