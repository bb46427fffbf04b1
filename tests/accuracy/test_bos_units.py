"""The BOS offset without a server: what the echo probe says, what the accuracy stage then asks
lm-eval to send (``lmeval.completion_plan``: tests/accuracy/test_bos_offset.py, with lm-eval),
and results from before the fix read as such (kit/contracts/results.py version 2) and shown so
in the report."""
from __future__ import annotations

import json

import pytest

from harness.accuracy import lmeval
from harness.accuracy.lmeval import Echo
from kit.contracts.results import ACCURACY, ACCURACY_ITEMS, ACCURACY_RUN, BOS_NOT_CORRECTED


@pytest.mark.parametrize("tokens, prefix", [
    (("<bos>", "1", ",", "2", ",", "3"), "<bos>"),   # vLLM / the kit's engine, Gemma's tokenizer
    (("1", ",", "2", ",", "3"), ""),                 # a tokenizer that adds nothing
    (("<s>", "1,2,3"), "<s>"),
    (("token_id:2", "token_id:9"), None),            # vLLM --return-tokens-as-token-ids: counts decide
    (None, None),
    (("", "1,2,3"), None),                           # a <bos> echoed as "": counts decide
])
def test_the_probe_names_the_token_put_before_the_text(tokens, prefix):
    assert Echo(len(tokens or ()), tokens).prefix() == prefix


# -- files from before the fix -------------------------------------------------------------
LL_RECORD = {"backend": "a", "model": "m", "task": "arc", "id": "3", "prompt_hash": "h",
             "response": "[-1.5, -3.25]", "extracted": 0, "correct": True, "answer": "0"}
ITEM_RECORD = {"backend": "a", "model": "m", "task": "items", "id": "q1", "prompt_hash": "h",
               "response": "Answer: 4", "extracted": "4", "correct": True, "answer": "4"}


@pytest.mark.parametrize("version", [None, 1])
def test_log_likelihood_records_from_before_version_2_are_read_marked(version):
    stamp = {} if version is None else {"schema_version": version}
    assert ACCURACY_ITEMS.version == ACCURACY.version == ACCURACY_RUN.version == 2
    assert ACCURACY_ITEMS.read(stamp | LL_RECORD)["bos_offset"] == BOS_NOT_CORRECTED
    assert "bos_offset" not in ACCURACY_ITEMS.read(stamp | ITEM_RECORD)  # a chat answer: nothing to correct
    assert "bos_offset" not in ACCURACY_ITEMS.read({"schema_version": 2} | LL_RECORD)
    assert ACCURACY.read(stamp | {"backends": {}, "pairs": []})["bos_offset"] == BOS_NOT_CORRECTED
    assert "bos_offset" not in ACCURACY.read({"schema_version": 2, "backends": {}, "pairs": []})


def _old_run(version=1, output_type="multiple_choice"):
    return {"schema_version": version, "settings": {}, "methods": {},
            "backends": {"a": {"model": "m", "status": "complete"}, "chat": {"model": "m", "status": "incomplete"}},
            "tasks": {"arc": {"leaves": {"arc": output_type}}},
            "skipped": [{"backend": "chat", "task": "arc", "reason": "needs /v1/completions with echo"}]}


def test_an_old_run_json_marks_the_backends_that_ran_a_log_likelihood_task():
    run = ACCURACY_RUN.read(_old_run())
    assert run["bos_offset"] == BOS_NOT_CORRECTED and run["backends"]["a"]["bos_offset"] == BOS_NOT_CORRECTED
    assert "bos_offset" not in run["backends"]["chat"]  # it could not run the task
    assert "bos_offset" not in ACCURACY_RUN.read(_old_run(output_type="generate_until"))
    assert "bos_offset" not in ACCURACY_RUN.read(_old_run(version=2))


def test_the_report_says_an_old_runs_log_likelihoods_are_not_corrected(tmp_path):
    from harness.report.accuracy import accuracy_table

    d = tmp_path / "accuracy"
    d.mkdir()
    (d / "accuracy.json").write_text(json.dumps({"schema_version": 1, "backends": {
        "a": {"n": 1, "correct": 1, "accuracy": 1.0, "ci95": [0.2, 1.0], "complete": True},
        "chat": {"n": 0, "correct": 0, "accuracy": None, "ci95": [None, None], "complete": False}}, "pairs": []}))
    (d / "run.json").write_text(json.dumps(_old_run()))

    class Run:
        path, notes = tmp_path, []

    _, rows = accuracy_table(Run)
    status = {r[0]: r[-1] for r in rows}
    assert status["a"].startswith("complete; bos offset not corrected: its log-likelihood tasks were scored before")
    assert "bos offset" not in status["chat"]


def test_uncorrected_lists_what_a_resume_asks_again(tmp_path):
    """The last scored record per item counts, as runner.finished reads them."""
    lines = [{"schema_version": 1} | LL_RECORD, {"schema_version": 1} | LL_RECORD | {"id": "4"},
             {"schema_version": 2} | LL_RECORD | {"id": "4"}, {"schema_version": 1} | ITEM_RECORD,
             {"schema_version": 2} | LL_RECORD | {"id": "5", "correct": None, "error": "400"}]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert lmeval.uncorrected(tmp_path) == {"a": {("arc", "3", "h")}}
