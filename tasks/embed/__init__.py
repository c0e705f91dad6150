"""Stage 4, embed: chunks to vectors with sentence-transformers, cached by content.

- :mod:`~tasks.embed.model`: the :class:`Embedder` (one model per process, bundled
  all-MiniLM-L6-v2 by default) and what the model reads;
- :mod:`~tasks.embed.task`: the embed task (Prefect), kept apart so a query does not
  import Prefect;
- :mod:`~tasks.embed.backends`: how the model runs (torch, torch-fp16, ONNX float32/int8)
  and what ``auto`` picks;
- :mod:`~tasks.embed.batches`: model inputs tokenised once, in parallel, into length-sorted
  numpy batches;
- :mod:`~tasks.embed.torch_path`: the torch backends' path from those batches to vectors;
- :mod:`~tasks.embed.cache`: the embedding cache (``data/cache/embeddings.db``): vectors by
  (model, sha256 of what the model reads), so no text is embedded twice.
"""

from tasks.embed.cache import EmbeddingCache
from tasks.embed.model import DEFAULT_MODEL, Embedder, check_model_available

__all__ = ["DEFAULT_MODEL", "Embedder", "EmbeddingCache", "check_model_available"]
