"""Reaching a backend on a private EC2 instance with no open port, and running a command there.

- ``tunnel``: the EC2 Instance Connect Endpoint path (presigned websocket, SSH, the local
  forwarder) and ``eic_tunnel``, which the run opens per EC2 backend;
- ``process`` / ``child``: the same forwarder in a process of its own (parent and child sides);
- ``openssh`` / ``eic_proxy``: OpenSSH's client carrying the bytes, with its ProxyCommand;
- ``hostkeys``: the access errors and the run's host-key pins;
- ``remote_exec``: one command over the SSH transport a tunnel already holds.

Nothing here imports the run, the account commands or the stages: the run and the tunnel
measurement (harness/calibration/tunnel.py) call in.
"""
