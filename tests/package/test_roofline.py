"""The cost model's roofline for a backend serving a package uses the scheme's real precisions:
emb4's int4 lm_head raises the g6 ceiling ~1.45x over text (measured 1.38x, public L4 runs)."""
from __future__ import annotations

import pytest

from harness.cost.roofline import roofline
from kit.schemes import SCHEMES, roofline_args, scheme_of_model


def test_package_model_ids_name_their_scheme():
    assert scheme_of_model("package").name == "emb4"
    assert scheme_of_model("package:ple4").name == "ple4"
    assert scheme_of_model("google/gemma-4-E2B-it") is None
    with pytest.raises(ValueError, match="valid: emb4, ple4, text, int8"):
        scheme_of_model("package:fp8")


def test_roofline_of_package_backends_follows_the_scheme():
    r = {n: roofline("g6.xlarge", f"package:{n}", **roofline_args(SCHEMES[n])) for n in ("emb4", "ple4", "text")}
    assert r["emb4"].embed_precision == "int4" and r["text"].embed_precision == "bf16"
    assert r["ple4"].bytes_per_token == pytest.approx(r["text"].bytes_per_token, rel=1e-3)
    assert 1.3 < r["emb4"].ceiling_tok_s / r["text"].ceiling_tok_s < 1.6


def test_cost_rows_use_the_package_precisions():
    from harness.cost.prices import PriceBook
    from harness.cost.rows import cost_row

    book = PriceBook.auto(offline=True)
    ref = book.bedrock("us.amazon.nova-micro-v1:0", "us-east-1")

    def row(model_id):
        return cost_row(service="ec2", instance_type="g6.xlarge", model_id=model_id, precision="int4",
                        region="us-east-1", measured={"decode_tok_s": 100.0}, measured_by="test", book=book,
                        reference=ref, input_per_output=5)["roofline"]

    emb4, text = row("package:emb4"), row("package:text")
    assert emb4["embed_precision"] == "int4" and text["embed_precision"] == "bf16"
    assert emb4["bytes_per_token"] < 0.8 * text["bytes_per_token"]
