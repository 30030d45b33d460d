r"""Dependency-free, deterministic embeddings by signed feature hashing.

:class:`HashingEmbeddingProvider` turns text into a fixed-size vector without a model:

* the text is lowercased and split into word tokens (``\w+``);
* every token contributes a word feature and its character n-grams, computed on the token
  wrapped in boundary markers (``<token>``), so ``"deploy"`` and ``"deployment"`` share
  most of their n-grams;
* adjacent token pairs contribute word-bigram features (optional);
* each feature is hashed with BLAKE2b (keyed by ``seed``; *not* Python's salted ``hash``)
  into one of ``dimensions`` buckets with a sign taken from the same digest;
* bucket values are damped sublinearly (``sign(x) * log1p(|x|)``) and the vector is
  L2-normalised. An empty text (no word tokens) embeds to the all-zero vector.

The same text gives the same vector in every process, on every machine and in every Python
version. Texts that share words or word stems get similar vectors; it is a lexical
similarity, not a semantic one, but it needs nothing beyond numpy and is fast (per-token
hashes are cached).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from cycgraph_memory._validate import check_bool
from cycgraph_memory.errors import InvalidInputError, InvalidTypeError

__all__ = ["HashingEmbeddingProvider"]

_TOKEN = re.compile(r"\w+", re.UNICODE)

_WORD_WEIGHT = 1.0
_BIGRAM_WEIGHT = 0.7
_NGRAM_WEIGHT = 0.35

_IntArray = npt.NDArray[np.int64]
_FloatArray = npt.NDArray[np.float64]


def _hash_features(
    features: Sequence[str], weight: float, dimensions: int, key: bytes
) -> tuple[_IntArray, _FloatArray]:
    """Hash features to (bucket indices, signed weights)."""
    buckets = np.empty(len(features), dtype=np.int64)
    values = np.empty(len(features), dtype=np.float64)
    for i, feature in enumerate(features):
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, key=key).digest()
        h = int.from_bytes(digest, "little")
        buckets[i] = (h >> 1) % dimensions
        values[i] = weight if h & 1 else -weight
    return buckets, values


@lru_cache(maxsize=131_072)
def _token_features(
    token: str, dimensions: int, ngram_min: int, ngram_max: int, key: bytes
) -> tuple[_IntArray, _FloatArray]:
    """Hashed word + character n-gram features of one token (cached; never mutate)."""
    marked = f"<{token}>"
    grams = [
        "c:" + marked[i : i + n]
        for n in range(ngram_min, ngram_max + 1)
        for i in range(len(marked) - n + 1)
    ]
    word_idx, word_val = _hash_features(["w:" + token], _WORD_WEIGHT, dimensions, key)
    gram_idx, gram_val = _hash_features(grams, _NGRAM_WEIGHT, dimensions, key)
    idx = np.concatenate([word_idx, gram_idx])
    val = np.concatenate([word_val, gram_val])
    idx.flags.writeable = False
    val.flags.writeable = False
    return idx, val


@lru_cache(maxsize=131_072)
def _bigram_feature(first: str, second: str, dimensions: int, key: bytes) -> tuple[int, float]:
    """Hashed word-bigram feature (cached)."""
    idx, val = _hash_features([f"b:{first} {second}"], _BIGRAM_WEIGHT, dimensions, key)
    return int(idx[0]), float(val[0])


class HashingEmbeddingProvider:
    """Deterministic, dependency-free :class:`~cycgraph_memory.contracts.EmbeddingProvider`.

    Args:
        dimensions: Length of every produced vector (>= 2).
        ngram_range: Inclusive ``(min, max)`` character n-gram sizes, computed on each token
            with boundary markers. ``(3, 5)`` by default.
        word_bigrams: Also hash adjacent word pairs, which rewards shared phrases.
        seed: Keys the hash function; different seeds give unrelated (but still
            deterministic) vector spaces. Vectors from different seeds must not be mixed.

    Raises:
        InvalidInputError: If an option is out of range.
    """

    def __init__(
        self,
        dimensions: int = 384,
        ngram_range: tuple[int, int] = (3, 5),
        *,
        word_bigrams: bool = True,
        seed: int = 0,
    ) -> None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 2:
            raise InvalidInputError(f"dimensions must be an integer >= 2, got {dimensions!r}")
        if (
            not isinstance(ngram_range, tuple | list)
            or len(ngram_range) != 2
            or any(isinstance(n, bool) or not isinstance(n, int) for n in ngram_range)
            or not 1 <= ngram_range[0] <= ngram_range[1]
        ):
            raise InvalidInputError(
                f"ngram_range must be (min, max) integers with 1 <= min <= max, "
                f"got {ngram_range!r}"
            )
        lo, hi = ngram_range
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**128:
            raise InvalidInputError(f"seed must be an integer in [0, 2**128), got {seed!r}")
        self._dimensions = dimensions
        self._ngram_min = lo
        self._ngram_max = hi
        self._word_bigrams = check_bool(word_bigrams, "word_bigrams")
        self._seed = seed
        self._key = seed.to_bytes(16, "little") if seed else b""

    @property
    def dimensions(self) -> int:
        """Dimensionality of produced embeddings."""
        return self._dimensions

    def __repr__(self) -> str:
        return (
            f"HashingEmbeddingProvider(dimensions={self._dimensions}, "
            f"ngram_range=({self._ngram_min}, {self._ngram_max}), "
            f"word_bigrams={self._word_bigrams}, seed={self._seed})"
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch of texts (one vector per text, same order).

        Args:
            texts: The texts. A bare ``str`` is rejected (wrap it in a list).

        Returns:
            One L2-normalised vector (or the zero vector for token-less text) per text.
        """
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """Synchronous variant of :meth:`embed` returning a ``(len(texts), dimensions)`` array.

        Raises:
            TypeError: If ``texts`` is a bare string, not a sequence, or contains a
                non-string.
        """
        if isinstance(texts, str | bytes | bytearray):
            raise InvalidTypeError("texts must be a sequence of strings, not a single string")
        if not isinstance(texts, Sequence):
            if not isinstance(texts, Iterable):
                raise InvalidTypeError(
                    f"texts must be a sequence of strings, got {type(texts).__name__}"
                )
            texts = list(texts)  # a generator or a set, like the other providers accept
        dim = self._dimensions
        n = len(texts)
        if n == 0:
            return np.zeros((0, dim), dtype=np.float64)
        # Per token only list appends: the cached feature arrays are concatenated once and
        # each row's offset added once for the whole batch (same values, same order).
        idx_parts: list[_IntArray] = []
        val_parts: list[_FloatArray] = []
        rows: list[int] = []
        lengths: list[int] = []
        lo, hi, key = self._ngram_min, self._ngram_max, self._key
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidTypeError(f"texts[{row}] is {type(text).__name__}, expected str")
            tokens = _TOKEN.findall(text.lower())
            if not tokens:
                continue
            for token in tokens:
                idx, val = _token_features(token, dim, lo, hi, key)
                idx_parts.append(idx)
                val_parts.append(val)
                rows.append(row)
                lengths.append(len(idx))
            if self._word_bigrams and len(tokens) > 1:
                pairs = [_bigram_feature(a, b, dim, key) for a, b in itertools.pairwise(tokens)]
                idx_parts.append(np.fromiter((p[0] for p in pairs), np.int64, len(pairs)))
                val_parts.append(np.fromiter((p[1] for p in pairs), np.float64, len(pairs)))
                rows.append(row)
                lengths.append(len(pairs))
        if not idx_parts:
            return np.zeros((n, dim), dtype=np.float64)
        offsets = np.repeat(np.asarray(rows, dtype=np.int64) * dim, lengths)
        flat = np.bincount(
            np.concatenate(idx_parts) + offsets,
            weights=np.concatenate(val_parts),
            minlength=n * dim,
        )
        raw: npt.NDArray[np.float64] = flat.reshape(n, dim).astype(np.float64, copy=False)
        matrix: npt.NDArray[np.float64] = np.sign(raw) * np.log1p(np.abs(raw))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0.0)
        return matrix
