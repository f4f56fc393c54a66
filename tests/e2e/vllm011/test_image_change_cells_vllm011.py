"""e2e: the code paths the nv-a100 and hygon-k100 images add to vLLM 0.11.0 (each backport's module at tensor-parallel
size 1 and sharded, the CPU MoE path, split experts, each other set of repairs with each rope
configuration R5 hands over), their cells run again on the real engine on the CPU: each comes out
as conformance/results.json says."""

import pytest

from tests.e2e.image_change_cells import changed_cells


@pytest.mark.e2e
def test_the_cells_the_image_changes_come_out_as_committed():
    assert changed_cells("0.11.0") == []
