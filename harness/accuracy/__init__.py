"""Accuracy per backend and precision: the same items on every backend, paired statistics.

``python -m harness.accuracy`` (harness.accuracy.cli) and the ``accuracy`` stage of harness.run.
Modules: items (a user's JSONL set, prompt, extraction), client (one call per protocol), runner
(ask, record as answers arrive), stats (intervals, McNemar, detectable difference), summary
(accuracy.json from the records), lmeval (lm-evaluation-harness for standard tasks).
"""
