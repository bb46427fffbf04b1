"""The kit measuring itself, apart from what a user's run executes: nothing in ``harness.run``
imports this package.

- ``refserver``: an OpenAI-compatible server with known pacing that records what it really sent
  (the truth the bench is checked against; also the bench tests' fixture).
- ``fidelity``: the load benchmark and GuideLLM against that truth (``make bench-fidelity``).
- ``tunnel``: what the port-less SSH tunnel costs a measurement, direct vs tunnel on loopback
  (``make bench-tunnel``).
- ``neuron_engine``: tokens/s per concurrency of a running Neuron engine (``make bench-engine``).
- ``loopback_sshd``: a real OpenSSH server on 127.0.0.1 (tunnel measurement, access tests).
- ``args``: the scripts' one-line command-line errors.
"""
