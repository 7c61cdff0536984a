"""Topic-hard batches (TAS-B, Hofstätter et al. 2021): anchors clustered by embedding with k-means, each
epoch's rows ordered cluster by cluster, so a batch holds rows of one topic (harder in-batch negatives).

k-means here is plain numpy, deterministic for a seed: k-means++ seeding, then Lloyd iterations on unit
vectors (dot product = cosine), until no assignment changes or ``max_iter``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_ITER = 50


@dataclass(frozen=True)
class Clustering:
    labels: np.ndarray  # cluster of each clustered vector
    k: int
    seed: int
    iterations: int
    inertia: float  # mean (1 - cosine) to the assigned centre

    def info(self) -> dict:
        sizes = np.bincount(self.labels, minlength=self.k)
        return {
            "method": "k-means (k-means++ seeding, Lloyd iterations, cosine on unit vectors)",
            "k": self.k,
            "seed": self.seed,
            "iterations": self.iterations,
            "mean_distance": round(self.inertia, 6),
            "cluster_sizes": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())},
        }


def kmeans(vectors: np.ndarray, k: int, seed: int, max_iter: int = MAX_ITER) -> Clustering:
    """Cluster unit vectors into ``k`` clusters (``k`` is capped at the number of vectors)."""
    x = np.asarray(vectors, dtype=np.float64)
    n = x.shape[0]
    if n == 0:
        raise ValueError("nothing to cluster")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms > 0, norms, 1.0)
    k = min(k, n)
    rng = np.random.default_rng(seed)
    centres = np.empty((k, x.shape[1]))
    centres[0] = x[rng.integers(n)]
    closest = np.maximum(0.0, 1.0 - x @ centres[0])
    for c in range(1, k):
        total = closest.sum()
        pick = int(rng.choice(n, p=closest / total)) if total > 0 else int(rng.integers(n))
        centres[c] = x[pick]
        closest = np.minimum(closest, np.maximum(0.0, 1.0 - x @ centres[c]))
    labels = np.full(n, -1, dtype=np.int64)
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 (reported)
        new = np.argmax(x @ centres.T, axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(k):
            members = x[labels == c]
            if members.shape[0]:
                mean = members.sum(axis=0)
                centres[c] = mean / (np.linalg.norm(mean) or 1.0)
            else:  # an emptied cluster takes the vector farthest from its centre
                far = int(np.argmin(np.einsum("ij,ij->i", x, centres[labels])))
                centres[c] = x[far]
    inertia = float(np.mean(1.0 - np.einsum("ij,ij->i", x, centres[labels])))
    return Clustering(labels, k, seed, iterations, inertia)


def cluster_sequence(row_cluster: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An epoch's rows: clusters in random order, each cluster's rows in random order."""
    n = row_cluster.shape[0]
    shuffled = rng.permutation(n)
    order = rng.permutation(int(row_cluster.max()) + 1 if n else 0)
    return shuffled[np.argsort(order[row_cluster[shuffled]], kind="stable")]


__all__ = ["Clustering", "cluster_sequence", "kmeans"]
