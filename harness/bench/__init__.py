"""Load benchmark: ``python -m harness.bench`` (cli.py) or ``harness.bench.api.run_bench``.

Modules: profiles (what to ask), clients (OpenAI/SageMaker/Bedrock behind one interface),
sse (stream parsing), record (raw per-request timings), load (closed/open loop), metrics
(everything derived, recomputable from requests.jsonl), store (files), locustfile. The paced
reference server and the fidelity script that check this package live in harness.calibration.
"""
