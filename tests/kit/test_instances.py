"""Instance facts in the catalog: the GPU families and their SageMaker twins."""
from __future__ import annotations

import pytest

from kit.catalog import BLACKWELL, INSTANCES


def test_g7e_is_gddr7_at_the_datasheet_bandwidth():
    assert BLACKWELL.memory_type == "GDDR7" and BLACKWELL.device_bandwidth_gb_s == 1597
    g = INSTANCES["ml.g7e.12xlarge"]
    # AWS: g7e.12xlarge has 2 GPUs, 192 GB; the seed's "HBM3e 8.0 TB/s" is gone.
    assert (g.accelerators, g.accel_memory_gib, g.bandwidth_gb_s) == (2, 192, 2 * 1597)
    assert all(s.bandwidth_gb_s != 8000 for s in INSTANCES.values())


@pytest.mark.parametrize("name,gpus,gb,gb_s", [
    ("g5.xlarge", 1, 24, 600), ("g5.12xlarge", 4, 96, 2400), ("g6.xlarge", 1, 24, 300),
    ("g6.12xlarge", 4, 96, 1200), ("g6e.xlarge", 1, 48, 864), ("g6e.12xlarge", 4, 192, 3456),
    ("g7e.2xlarge", 1, 96, 1597), ("g7e.24xlarge", 4, 384, 6388)])
def test_families_and_twins(name, gpus, gb, gb_s):
    for n in (name, "ml." + name):
        s = INSTANCES[n]
        assert (s.accelerators, s.accel_memory_gib, s.bandwidth_gb_s) == (gpus, gb, gb_s), n
        assert s.source, n


def test_per_device_figures():
    assert INSTANCES["g6e.12xlarge"].memory_bytes_per_device == 48e9
    assert INSTANCES["inf2.xlarge"].memory_bytes_per_device == 16 * 2**30  # one NeuronCore
    assert INSTANCES["inf2.xlarge"].bandwidth_per_device_gb_s == 817 / 2
    assert INSTANCES["inf2.48xlarge"].devices == 24
