"""Our samplers against sentence-transformers' own, and the global-batch grouping."""

from __future__ import annotations

import random

import numpy as np
import pytest

from contrast_audit.config import PlanConfig
from contrast_audit.plan import Plan, make_plan, no_duplicates_batches, random_batches

torch = pytest.importorskip("torch")


def _st_sampler():
    return pytest.importorskip("sentence_transformers.base.sampler")


class TinyDataset:
    """The slice of ``datasets.Dataset`` the samplers touch (``datasets`` is not installed)."""

    def __init__(self, columns: dict[str, list[str]]) -> None:
        self._columns = columns

    @property
    def column_names(self) -> list[str]:
        return list(self._columns)

    def __len__(self) -> int:
        return len(next(iter(self._columns.values())))

    def __getitem__(self, index: int) -> dict[str, str]:
        return {name: values[index] for name, values in self._columns.items()}

    def remove_columns(self, names: list[str]) -> TinyDataset:
        return TinyDataset({k: v for k, v in self._columns.items() if k not in names})


def _values(ds: TinyDataset) -> np.ndarray:
    """Rows × columns of exact-string ids, as ``Corpus.raw`` holds them."""
    ids: dict[str, int] = {}
    return np.array(
        [[ids.setdefault(ds[i][c], len(ids)) for c in ds.column_names] for i in range(len(ds))],
        dtype=np.int64,
    )


def _duplicate_heavy(n: int, seed: int = 0) -> TinyDataset:
    rng = random.Random(seed)
    anchors = [f"question {rng.randrange(9)}" for _ in range(n)]
    positives = [f"answer {rng.randrange(14)}" for _ in range(n)]
    # Some texts appear in two roles, so duplicates cross columns too.
    negatives = [rng.choice([f"answer {rng.randrange(14)}", f"other {rng.randrange(40)}"]) for _ in range(n)]
    return TinyDataset({"anchor": anchors, "positive": positives, "negative": negatives})


def _as_lists(batches) -> list[list[int]]:
    return [[int(i) for i in b] for b in batches]


@pytest.mark.parametrize("n", [1, 10, 64, 101])
@pytest.mark.parametrize("batch_size", [1, 8, 32])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("seed", [0, 42])
def test_random_matches_default_batch_sampler(n: int, batch_size: int, drop_last: bool, seed: int) -> None:
    st = _st_sampler()
    from torch.utils.data import RandomSampler

    ds = TinyDataset({"anchor": [str(i) for i in range(n)]})
    generator = torch.Generator().manual_seed(seed)
    reference = list(st.DefaultBatchSampler(RandomSampler(ds, generator=generator), batch_size, drop_last))
    assert _as_lists(random_batches(n, batch_size, drop_last, seed, epoch=0)) == reference


def test_random_epoch_reseeds_with_seed_plus_epoch() -> None:
    assert _as_lists(random_batches(50, 8, False, seed=3, epoch=2)) == _as_lists(
        random_batches(50, 8, False, seed=5, epoch=0)
    )
    assert _as_lists(random_batches(50, 8, False, 3, 0)) != _as_lists(random_batches(50, 8, False, 3, 1))


@pytest.mark.parametrize("drop_last", [False, True])
# Cases cover: resampling that reaches len(sampler) mid-pass (60/6, 40/4), resampling that stays
# short (60/8, 97/8) and no full batch at all (97/16).
@pytest.mark.parametrize(("n", "batch_size"), [(60, 8), (97, 8), (60, 6), (40, 4), (97, 16)])
@pytest.mark.parametrize("seed", [0, 12345])
def test_no_duplicates_matches_reference(drop_last: bool, n: int, batch_size: int, seed: int) -> None:
    st = _st_sampler()
    ds = _duplicate_heavy(n, seed=n)
    values = _values(ds)
    reference = st.NoDuplicatesBatchSampler(ds, batch_size, drop_last, generator=torch.Generator(), seed=seed)
    for epoch in (0, 1):
        reference.set_epoch(epoch)
        expected = list(reference)
        got = _as_lists(no_duplicates_batches(values, batch_size, drop_last, seed, epoch))
        assert got == expected, f"epoch {epoch}"


def test_no_duplicates_case_exercises_deferral_and_resampling() -> None:
    """Guard the reference comparison above: its data must make deferral and resampling matter."""
    ds = _duplicate_heavy(60, seed=60)
    values = _values(ds)
    kept = no_duplicates_batches(values, 6, False, 0, 0)
    # Deferral: with duplicates the greedy pass leaves short batches behind.
    assert len(kept) > 60 // 6
    assert sorted(np.concatenate(kept).tolist()) == list(range(60))
    dropped = no_duplicates_batches(values, 6, True, 0, 0)
    # Resampling: drop_last falls short in one pass and reshuffles to reach len(sampler) batches.
    assert len(dropped) == 60 // 6
    rows = np.concatenate(dropped)
    assert np.unique(rows).shape[0] < rows.shape[0]
    for batch in kept + dropped:
        per_row = [set(values[i].tolist()) for i in batch]
        assert len(set().union(*per_row)) == sum(map(len, per_row)), "two rows of a batch share a text"


def test_no_duplicates_ignores_padding() -> None:
    values = np.array([[0, 1, -1], [2, 3, -1], [4, 5, 6]], dtype=np.int64)
    batches = no_duplicates_batches(values, 3, False, 0, 0)
    assert sorted(_as_lists(batches)[0]) == [0, 1, 2]


def test_no_duplicates_empty() -> None:
    assert no_duplicates_batches(np.zeros((0, 2), dtype=np.int64), 4, False, 0, 0) == []


@pytest.mark.parametrize("sampler", ["random", "no-duplicates"])
def test_plans_are_deterministic_per_seed(sampler: str) -> None:
    values = _values(_duplicate_heavy(80))

    def plan(seed: int) -> list[list[int]]:
        cfg = PlanConfig(batch_size=8, seed=seed, epochs=2, sampler=sampler)
        p = make_plan(cfg, values.shape[0], values)
        assert p.source == sampler
        assert set(p.epoch.tolist()) == {0, 1}
        return [p.batch(i).tolist() for i in range(p.n_batches)]

    assert plan(7) == plan(7)
    assert plan(7) != plan(8)


def test_make_plan_epochs_are_consecutive_and_complete() -> None:
    cfg = PlanConfig(batch_size=8, seed=1, epochs=3)
    p = make_plan(cfg, 30, np.zeros((30, 2), dtype=np.int64))
    assert p.epoch.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    for epoch in range(3):
        rows = np.concatenate([p.batch(i) for i in range(p.n_batches) if p.epoch[i] == epoch])
        assert sorted(rows.tolist()) == list(range(30))


def _plan(sizes_per_epoch: list[list[int]]) -> Plan:
    batches, epochs, start = [], [], 0
    for epoch, sizes in enumerate(sizes_per_epoch):
        for size in sizes:
            batches.append(np.arange(start, start + size))
            epochs.append(epoch)
            start += size
    return Plan.from_batches(batches, epochs, "test")


def _groups(plan: Plan, world_size: int) -> list[tuple[int, list[int]]]:
    g = plan.global_batches(world_size)
    return [(int(g.epoch[i]), g.rows[g.offsets[i] : g.offsets[i + 1]].tolist()) for i in range(len(g))]


def test_world_size_one_keeps_device_batches() -> None:
    plan = _plan([[2, 2, 1]])
    assert _groups(plan, 1) == [(0, [0, 1]), (0, [2, 3]), (0, [4])]


def test_world_size_two_pairs_consecutive_batches_within_an_epoch() -> None:
    # Epoch 0 has 3 device batches (A B | C), epoch 1 has 4 (D E | F G): C must not join D.
    plan = _plan([[2, 2, 1], [2, 2, 2, 1]])
    assert _groups(plan, 2) == [
        (0, [0, 1, 2, 3]),
        (0, [4]),
        (1, [5, 6, 7, 8]),
        (1, [9, 10, 11]),
    ]
    g = plan.global_batches(2)
    assert g.sizes.tolist() == [4, 1, 4, 3]
    assert len(g) == 4


def test_world_size_larger_than_an_epoch() -> None:
    plan = _plan([[3, 3], [3]])
    assert _groups(plan, 4) == [(0, [0, 1, 2, 3, 4, 5]), (1, [6, 7, 8])]


def test_global_batches_of_an_empty_plan() -> None:
    plan = Plan.from_batches([], [], "test")
    assert plan.n_batches == 0
    assert len(plan.global_batches(2)) == 0


@pytest.mark.parametrize("seed", [0, 1, 42, 12345, 2**31 - 1, 2**32 - 1, 2**32 + 7, 2**63 - 1])
def test_randperm_is_torchs_for_the_seed(seed: int) -> None:
    from contrast_audit.plan.samplers import TorchCPUGenerator

    ours = TorchCPUGenerator(seed)
    generator = torch.Generator()
    generator.manual_seed(seed)
    for n in (0, 1, 2, 3, 7, 64, 1000, 65_537):  # one stream: each draw continues the last
        expected = torch.randperm(n, generator=generator).numpy()
        assert np.array_equal(ours.randperm(n), expected), n


def test_randperm_is_a_permutation_at_scale() -> None:
    from contrast_audit.plan.samplers import TorchCPUGenerator

    generator = torch.Generator()
    generator.manual_seed(7)
    got = TorchCPUGenerator(7).randperm(1_000_003)
    assert np.array_equal(got, torch.randperm(1_000_003, generator=generator).numpy())
    assert np.array_equal(np.sort(got), np.arange(1_000_003))


def test_planning_does_not_import_torch() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import numpy as np\n"
        "from contrast_audit.config import PlanConfig\n"
        "from contrast_audit.plan import make_plan\n"
        "for sampler in ('random', 'no-duplicates'):\n"
        "    make_plan(PlanConfig(batch_size=4, sampler=sampler, epochs=2), 50, np.arange(100).reshape(50, 2) % 30)\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
