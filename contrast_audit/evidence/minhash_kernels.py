"""The MinHash inner loops, compiled with numba: signing (fold token hashes into shingle hashes,
permute, take the minimum), band keys and candidate verification. Each is the loop numpy would run
over a (shingles × permutations) or (pairs × permutations) temporary array, run instead one text or
pair at a time in registers, on every usable core (``prange``), and stopped early where the answer
is known. The arithmetic is datasketch's ``affine32`` scheme and the package's band-key mix, bit
for bit (tested against datasketch and the numpy formulation in ``tests/evidence/test_minhash.py``).

Compiled code is cached on disk where numba finds a writable place (beside this file, else the
user's cache directory), so only a fresh install compiles (a few seconds, once); where it finds none
(a read-only install and home), each process compiles afresh instead of failing.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from contrast_audit.resources import usable_cpus

_MASK32 = np.uint64(0xFFFFFFFF)


def _compiled(**options):
    """``njit`` with its machine code cached on disk, or not cached where numba has nowhere to write
    it (it refuses to decorate then)."""

    def wrap(fn):
        try:
            return njit(cache=True, **options)(fn)
        except RuntimeError:  # "cannot cache function …: no locator available"
            return njit(**options)(fn)

    return wrap


# numba starts one thread per CPU of the machine; a CPU quota or affinity mask may allow fewer.
numba.set_num_threads(max(1, min(usable_cpus(), numba.config.NUMBA_NUM_THREADS)))


@_compiled(parallel=True, nogil=True)
def sign_tokens(hashes, offsets, rows, ngram, a, b, out):  # pragma: no cover - compiled
    """Text ``t`` has the token hashes ``hashes[offsets[t]:offsets[t + 1]]``; each run of ``ngram``
    of them (all of them when fewer) is one shingle, whose hash folds its token hashes in order with
    MurmurHash3's 64-bit finalizer (``minhash.shingle_hash``) and is then mixed by the 32-bit
    finalizer (datasketch's input mix), and ``out[rows[t], p]`` is the least
    ``(a[p] * h + b[p]) mod 2**32`` over its shingles. A text without tokens keeps its row."""
    k = a.shape[0]
    n = rows.shape[0]
    for t in prange(n):
        lo = offsets[t]
        m = offsets[t + 1] - lo
        if m == 0:
            continue
        width = min(ngram, m)
        best = np.full(k, 0xFFFFFFFF, dtype=np.uint32)
        for s in range(m - width + 1):
            h = np.uint64(0x9E3779B97F4A7C15)
            for q in range(width):
                h = _fmix64(h ^ np.uint64(hashes[lo + s + q]))
            hv = _fmix32(h & _MASK32)
            for p in range(k):
                v = np.uint32((np.uint64(a[p]) * hv + np.uint64(b[p])) & _MASK32)
                if v < best[p]:
                    best[p] = v
        out[rows[t], :] = best


@_compiled(inline="always")
def _fmix32(h):  # pragma: no cover - compiled
    """MurmurHash3's 32-bit finalizer of the low 32 bits of ``h`` (a uint64), as a uint64."""
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & _MASK32
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & _MASK32
    h ^= h >> np.uint64(16)
    return h


@_compiled(inline="always")
def _fmix64(h):  # pragma: no cover - compiled
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@_compiled(parallel=True, nogil=True)
def band_keys(values, bands, rows, out):  # pragma: no cover - compiled
    """``out[t, j]``: band ``j``'s key of signature ``values[t]`` (``minhash.band_keys``)."""
    n = values.shape[0]
    for t in prange(n):
        for j in range(bands):
            key = np.uint64(0x9E3779B97F4A7C15) + np.uint64(j)
            lo = j * rows
            for c in range(0, rows, 2):
                word = np.uint64(values[t, lo + c]) << np.uint64(32)
                if c + 1 < rows:
                    word |= np.uint64(values[t, lo + c + 1])
                key = _fmix64(key ^ word)
            out[t, j] = key


@_compiled(parallel=True, nogil=True)
def equal_at_least(values, rows, other, other_rows, need, out):  # pragma: no cover - compiled
    """``out[i]``: how many values ``values[rows[i]]`` and ``other[other_rows[i]]`` share, where that is
    at least ``need``; 0 where it is not (the comparison stops once it cannot be)."""
    k = values.shape[1]
    allowed = k - need
    n = rows.shape[0]
    for i in prange(n):
        x = values[rows[i]]
        y = other[other_rows[i]]
        miss = 0
        p = 0
        while p < k and miss <= allowed:
            end = min(p + 16, k)  # a block at a time: the compare vectorises, the exit is checked per block
            for q in range(p, end):
                miss += x[q] != y[q]
            p = end
        out[i] = k - miss if miss <= allowed else 0
