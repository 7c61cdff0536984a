"""The neighbour-search benchmark's vectors: reference vectors are float16 unit vectors, and every
tenth query is planted above the threshold near one reference vector, which the exact search finds."""

from __future__ import annotations

import numpy as np

from bench.neighbour_search import make_vectors
from contrast_audit.overlap import neighbours


def test_planted_queries_are_found_above_the_threshold_and_the_others_are_not() -> None:
    ref, q = make_vectors(5000, 200, topics=50, dim=64, seed=1)
    assert ref.dtype == np.float16 and q.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ref.astype(np.float32), axis=1), 1.0, atol=2e-3)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    found = neighbours(q, ref, 0.825)
    planted = set(range(0, 200, 10))
    assert set(found.get_column("new").to_list()) == planted
    assert found.get_column("s_embedding").min() >= 0.825
    # Texts of one topic are related but far from duplicates.
    same_topic = (ref[:500].astype(np.float32) @ ref[:500].astype(np.float32).T)[np.triu_indices(500, 1)]
    assert 0.3 < np.quantile(same_topic, 0.999) < 0.825
