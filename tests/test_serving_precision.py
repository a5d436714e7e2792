"""The policy server's precision (``--dtype``) and its decode attention (``trainers.serving``).

``auto`` must pick bf16 only on a CPU with native bf16 and a model big enough to gain from it; a model served
in bf16 (runtime LoRA adapter included) must sample what fp32 samples up to bf16 rounding; the decode step's
attention (two batched matmuls) must equal ``scaled_dot_product_attention`` over the same padded cache.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.test_policy_server import MESSAGES, SIZE, TOOLS, _make_adapter
from trainers.serving.cli import make_parser
from trainers.serving.engine import PolicyEngine
from trainers.serving.forward import decode_attention
from trainers.serving.precision import AUTO_BF16_MIN_PARAMETERS, bf16_cpu_flags, resolve_dtype
from trainers.serving.sampling import SamplingParams
from trainers.tiny import build_model, build_tiny_tokenizer

torch.set_num_threads(1)

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx2 avx512f {extra} rdpid fsrm
"""


@pytest.mark.parametrize(
    ("extra", "found"),
    [("avx512_bf16 avx512_vnni", ("avx512_bf16",)), ("amx_bf16 amx_tile avx512_bf16", ("amx_bf16", "avx512_bf16"))]
    + [("avx512_vnni", ())],
)
def test_bf16_flags_are_read_from_cpuinfo(tmp_path: Path, extra: str, found: tuple[str, ...]) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(extra=extra))
    assert bf16_cpu_flags(cpuinfo) == found
    assert bf16_cpu_flags(tmp_path / "missing") == ()  # an unreadable file: no bf16, fp32 is safe


def test_auto_is_bf16_only_on_a_bf16_cpu_for_a_big_model() -> None:
    big, tiny = AUTO_BF16_MIN_PARAMETERS, 930_000
    assert resolve_dtype("auto", num_parameters=big, cpu_flags=("avx512_bf16",)) is torch.bfloat16
    assert resolve_dtype("auto", num_parameters=big, cpu_flags=("amx_bf16",)) is torch.bfloat16
    assert resolve_dtype("auto", num_parameters=big, cpu_flags=()) is torch.float32
    assert resolve_dtype("auto", num_parameters=tiny, cpu_flags=("amx_bf16",)) is torch.float32
    assert resolve_dtype("float32", cpu_flags=("amx_bf16",)) is torch.float32
    assert resolve_dtype("bfloat16", cpu_flags=()) is torch.bfloat16  # asked for: served, emulated if need be
    with pytest.raises(ValueError, match="auto, float32, bfloat16; got 'fp16'"):
        resolve_dtype("fp16")


def test_the_command_line_defaults_to_auto_and_refuses_other_dtypes(capsys: pytest.CaptureFixture) -> None:
    assert make_parser().parse_args(["--model", "m"]).dtype == "auto"
    assert make_parser().parse_args(["--model", "m", "--dtype", "bfloat16"]).dtype == "bfloat16"
    with pytest.raises(SystemExit):
        make_parser().parse_args(["--model", "m", "--dtype", "float16"])
    assert "invalid choice: 'float16'" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_attention_equals_sdpa_over_a_padded_grown_cache(dtype: torch.dtype) -> None:
    """Grouped-query heads (6 query heads on 2 kv heads), left padding, and the cache a view of a bigger buffer
    (``kv.GrowableLayer``'s spare columns): the attention the lean decode step computes is SDPA's."""
    torch.manual_seed(0)
    rows, heads, kv_heads, columns, head_dim = 5, 6, 2, 23, 16
    q = torch.randn(rows, heads, 1, head_dim, dtype=dtype)
    buffers = [torch.randn(rows, kv_heads, columns + 7, head_dim, dtype=dtype) for _ in range(2)]
    k, v = (b[:, :, :columns] for b in buffers)
    mask = torch.ones(rows, columns, dtype=torch.long)
    for row, padding in enumerate([0, 3, 10, 22, 1]):
        mask[row, :padding] = 0
    bias = torch.zeros(rows, columns).masked_fill(mask == 0, float("-inf"))[:, None, None, :]
    got = decode_attention(q, k, v, bias, 0.25)
    want = F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask.bool()[:, None, None, :], scale=0.25, enable_gqa=True
    )
    want = want.transpose(1, 2).reshape(rows, 1, heads * head_dim)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 1e-6 if dtype is torch.float32 else 2e-2  # bf16 inputs: the probabilities are rounded to 8 bits
    assert (got.float() - want).abs().max() < tol


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("precision")
    tokenizer = build_tiny_tokenizer(200)
    torch.manual_seed(3)
    model = build_model(tokenizer, SIZE)
    with torch.no_grad():  # sharper than an initialised model: logprobs far from uniform, as a trained one's
        for param in model.parameters():
            param.mul_(2.0)
    model.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    return {"base": root / "base", "adapter": _make_adapter(root / "base", root / "adapter", 1)}


def test_a_lora_adapter_served_in_bf16_gives_the_fp32_logprobs(tiny: dict[str, Path]) -> None:
    """The same tokens scored by the fp32 and the bf16 engine (base and a runtime LoRA adapter): the
    processed logprobs agree up to bf16 rounding, and the adapter's effect is far larger than that."""
    engines = {dtype: PolicyEngine(tiny["base"], dtype=dtype) for dtype in ("float32", "bfloat16")}
    assert engines["bfloat16"].dtype is torch.bfloat16 and engines["float32"].dtype is torch.float32
    for engine in engines.values():
        engine.load_adapter("lora", str(tiny["adapter"]))
    lora_weight = next(p for n, p in engines["bfloat16"].model.named_parameters() if "lora_A" in n)
    assert lora_weight.dtype in (torch.bfloat16, torch.float32)
    tok = engines["float32"].tokenizer
    prompt = tok(tok.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False),
                 add_special_tokens=False).input_ids  # fmt: skip
    params = SamplingParams(temperature=0, max_tokens=1, top_logprobs=20)
    top = {}
    for (dtype, engine), model in ((pair, model) for pair in engines.items() for model in (None, "lora")):
        (completion,) = engine.generate([prompt], [params], model=model)
        top[dtype, model] = dict(completion.top_logprobs[0])
    for model in (None, "lora"):
        fp32, bf16 = top["float32", model], top["bfloat16", model]
        shared = set(fp32) & set(bf16)
        assert len(shared) >= 15
        gap = max(abs(fp32[i] - bf16[i]) for i in shared)
        assert gap < 0.05, (model, gap)
    base, lora = top["float32", None], top["float32", "lora"]
    effect = max(abs(base[i] - lora[i]) for i in set(base) & set(lora))
    assert effect > 0.2, effect  # the adapter changes the distribution: the gap above is not the adapter missing


def test_bf16_on_a_cpu_without_it_is_served_with_a_warning(
    tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import trainers.serving.engine as engine_module

    monkeypatch.setattr(engine_module, "bf16_cpu_flags", lambda: ())
    with caplog.at_level("WARNING", logger="trainers.policy_server"):
        engine = PolicyEngine(tiny["base"], dtype="bfloat16")
    assert engine.dtype is torch.bfloat16
    assert "without native bf16 (no amx_bf16 or avx512_bf16 in /proc/cpuinfo)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="trainers.policy_server"):
        PolicyEngine(tiny["base"], dtype="float32")
    assert "native bf16" not in caplog.text


@pytest.mark.parametrize(("dtype", "served"), [(None, "float32"), ("bfloat16", "bfloat16")])
def test_the_server_process_runs_the_dtype_it_is_given(tmp_path: Path, dtype: str | None, served: str) -> None:
    """``PolicyServerProcess(dtype=...)`` (what ``trainers.grpo``'s ``policy_server_dtype`` sets) reaches the
    server's ``--dtype``; without it the server's ``auto`` keeps the tiny policy in fp32 on any CPU."""
    import httpx

    from trainers.serving import PolicyServerProcess

    model = Path(__file__).resolve().parent.parent / "checkpoints" / "tiny-policy"
    with PolicyServerProcess(model, threads=1, log_path=tmp_path / "server.log", dtype=dtype) as server:
        body = {"model": server.model_name, "messages": MESSAGES, "max_tokens": 4, "temperature": 0}
        r = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
    assert f"1 threads, {served}, seed" in (tmp_path / "server.log").read_text()
