"""Unit tests for tasks/embed/model.py with the real bundled all-MiniLM-L6-v2 (offline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tasks.embed.model import DEFAULT_MODEL, Embedder, load_model, resolve_model_path

DIM = 384


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(DEFAULT_MODEL, batch_size=4, device="cpu", backend="torch")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.slow
def test_dimension(embedder: Embedder) -> None:
    assert embedder.dimension == DIM
    assert embedder.model_id == DEFAULT_MODEL


@pytest.mark.slow
def test_rows_are_unit_norm_float32(embedder: Embedder) -> None:
    texts = [
        "A lighthouse guides ships at night.",
        "x",
        "灯台は夜に船を導く。",
        "a much longer sentence " * 40,  # longer than one batch member, past the token limit
        "   ",
        "The keeper trimmed the wick.",
    ]
    vectors = embedder.embed(texts)
    assert vectors.shape == (len(texts), DIM)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()


@pytest.mark.slow
def test_embedding_is_deterministic_and_order_preserving(embedder: Embedder) -> None:
    texts = ["first text about fog horns", "second text on lenses", "third: the keeper's log"]
    forward = embedder.embed(texts)
    backward = embedder.embed(list(reversed(texts)))
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-5)
    single = embedder.embed(texts[1:2])
    np.testing.assert_allclose(single[0], forward[1], atol=1e-5)


@pytest.mark.slow
def test_model_loaded_once_per_process(embedder: Embedder) -> None:
    first = load_model(DEFAULT_MODEL, "cpu")
    assert load_model(DEFAULT_MODEL, "cpu") is first
    assert load_model("sentence-transformers/all-MiniLM-L6-v2", "cpu") is first
    assert embedder.model.model is first  # type: ignore[attr-defined]  # the fast torch path
    assert Embedder(DEFAULT_MODEL, device="cpu", backend="torch").model is embedder.model
    assert load_model(DEFAULT_MODEL) is load_model(DEFAULT_MODEL)  # default device too


@pytest.mark.slow
def test_empty_input(embedder: Embedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, DIM)
    assert vectors.dtype == np.float32


@pytest.mark.slow
def test_paraphrase_is_closer_than_unrelated_sentence(embedder: Embedder) -> None:
    anchor, paraphrase, unrelated = embedder.embed(
        [
            "The lighthouse keeper lit the lamp at dusk.",
            "At nightfall, the man who tends the lighthouse switched on its light.",
            "Quarterly revenue rose four percent on strong software sales.",
        ]
    )
    near, far = cosine(anchor, paraphrase), cosine(anchor, unrelated)
    assert near > far + 0.2, (near, far)
    assert near == pytest.approx(float(anchor @ paraphrase), abs=1e-5)  # unit rows: dot is cosine


@pytest.mark.parametrize("name", [DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"])
def test_resolve_bundled_model_path(name: str) -> None:
    path = Path(resolve_model_path(name))
    assert path.is_dir()
    assert path.is_absolute()
    assert any(path.iterdir())


@pytest.mark.parametrize(
    "name", ["sentence-transformers/all-mpnet-base-v2", "/models/my-model", "all-MiniLM-L12-v2"]
)
def test_resolve_other_names_pass_through(name: str) -> None:
    assert resolve_model_path(name) == name


def test_model_input_puts_document_context_before_the_exact_text() -> None:
    from dataclasses import replace

    from tasks.common.documents import Chunk, Header, model_input

    chunk = Chunk(
        chunk_id="c",
        doc_id="d",
        source="docs/aws/secrets_manager.md",
        chunk_index=0,
        start_index=0,
        end_index=31,
        text="::: prefect_aws.secrets_manager",
        n_chars=31,
        headers=(Header(1, "AWS"), Header(2, "Secrets")),
        metadata={"description": "Tasks for  interacting with\nAWS Secrets Manager"},
    )
    assert model_input(chunk) == (
        "secrets manager\nTasks for interacting with AWS Secrets Manager\nAWS > Secrets\n\n"
        "::: prefect_aws.secrets_manager"
    )
    titled = replace(chunk, metadata={"title": "AWS"}, headers=(Header(1, "AWS"),))
    assert model_input(titled) == "AWS\n\n::: prefect_aws.secrets_manager"  # no repeated path
    bare = replace(chunk, source="", metadata={}, headers=())
    assert model_input(bare) == bare.text


def test_a_model_must_be_on_this_machine_when_downloads_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.common.errors import ConfigError
    from tasks.embed.model import check_model_available, register_encoder
    from tests.fake_encoder import HashEncoder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_model_available("all-MiniLM-L6-v2")  # bundled
    register_encoder("hash-check-8", lambda: HashEncoder(8))
    check_model_available("hash-check-8")  # registered
    check_model_available(str(tmp_path))  # a folder
    with pytest.raises(ConfigError) as info:
        check_model_available("nonexistent-model")
    assert "model 'nonexistent-model' not found locally" in str(info.value)
    assert "sentence-transformers/nonexistent-model" in str(info.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the library may download: nothing to check
    check_model_available("nonexistent-model")


def test_on_cuda_every_backend_encodes_in_large_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU run's bug: ``torch`` on CUDA encoded in batches of 32 (the device was None)."""
    from typing import Any

    from tasks.embed import model as embed
    from tasks.embed.model import forward_batch_size, register_encoder

    assert forward_batch_size(32, "torch", "cuda") == 256
    assert forward_batch_size(32, "torch", "cuda:1") == 256
    assert forward_batch_size(512, "torch", "cuda") == 512
    assert forward_batch_size(32, "torch-fp16", "cuda") == 256
    assert forward_batch_size(32, "onnx", "cpu") == 32

    seen: list[int] = []

    class Recorder:
        def encode(self, texts: list[str], batch_size: int, **_: Any) -> np.ndarray:
            seen.append(batch_size)
            return np.ones((len(texts), 4), dtype=np.float32) / 2

        def get_embedding_dimension(self) -> int:
            return 4

    register_encoder("batch-recorder", Recorder)
    monkeypatch.setattr(embed, "default_device", lambda: "cuda")  # a CUDA machine, no device set
    embedder = Embedder("batch-recorder", batch_size=32, backend="torch")
    assert embedder.resolved_device == "cuda"
    embedder.embed(["a", "b"])
    assert seen == [256]


@pytest.mark.slow
def test_the_bundled_models_files_give_its_loaded_dimension(embedder: Embedder) -> None:
    from tasks.embed.model import local_model_folder, model_dimension
    from tasks.embed.model_files import dimension_from_files

    folder = local_model_folder(DEFAULT_MODEL)
    assert folder == Path(resolve_model_path(DEFAULT_MODEL))
    assert dimension_from_files(folder) == embedder.dimension == DIM
    assert model_dimension(DEFAULT_MODEL, "torch") == DIM


def _model_folder(root: Path, modules: list[tuple[str, str, dict[str, object]]]) -> Path:
    """Write a sentence-transformers folder's JSON files: (type, path, config) per module."""
    import json

    root.mkdir()
    (root / "config.json").write_text(json.dumps({"hidden_size": 384}))
    listed = []
    for i, (kind, path, config) in enumerate(modules):
        listed.append({"idx": i, "name": str(i), "path": path, "type": kind})
        if path:
            (root / path).mkdir()
            (root / path / "config.json").write_text(json.dumps(config))
    (root / "modules.json").write_text(json.dumps(listed))
    return root


def test_dimension_from_files_follows_the_last_module_that_sets_it(tmp_path: Path) -> None:
    from tasks.embed.model_files import dimension_from_files

    transformer = ("sentence_transformers.models.Transformer", "", {})
    pooling = (
        "sentence_transformers.models.Pooling",
        "1_Pooling",
        {"word_embedding_dimension": 384, "pooling_mode_mean_tokens": True},
    )
    dense = ("sentence_transformers.models.Dense", "2_Dense", {"out_features": 256})
    two_modes = (
        "sentence_transformers.models.Pooling",
        "1_Pooling",
        {
            "word_embedding_dimension": 384,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": True,
        },
    )
    assert dimension_from_files(_model_folder(tmp_path / "a", [transformer, pooling])) == 384
    assert dimension_from_files(_model_folder(tmp_path / "b", [transformer, pooling, dense])) == 256
    assert dimension_from_files(_model_folder(tmp_path / "c", [transformer, two_modes])) == 768
    broken = _model_folder(tmp_path / "d", [transformer, pooling])
    (broken / "1_Pooling" / "config.json").write_text("{not json")
    assert dimension_from_files(broken) is None  # a size we cannot read: load the model
    plain = tmp_path / "e"  # a Hugging Face model without sentence-transformers files
    plain.mkdir()
    (plain / "config.json").write_text('{"hidden_size": 512}')
    assert dimension_from_files(plain) == 512
    assert dimension_from_files(tmp_path / "missing") is None


@pytest.mark.slow
def test_a_model_whose_files_do_not_say_is_loaded_with_the_runs_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tasks.embed.model as model
    from tasks.embed.model import model_dimension

    # files that do not say the size (the reading itself is tested above)
    monkeypatch.setattr(model, "dimension_from_files", lambda folder: None)
    loaded: list[str] = []
    real_onnx, real_torch = model.load_onnx, model.load_model

    def onnx(*args: object, **kwargs: object) -> object:
        loaded.append("onnx")
        return real_onnx(*args, **kwargs)  # type: ignore[arg-type]

    def torch(*args: object, **kwargs: object) -> object:
        loaded.append("torch")
        return real_torch(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model, "load_onnx", onnx)
    monkeypatch.setattr(model, "load_model", torch)
    # the model is loaded, with the backend asked for (before, an ONNX export ran
    # whatever --embed-backend said)
    assert model_dimension(DEFAULT_MODEL, "torch") == DIM
    assert loaded == ["torch"]
