"""A checkpoint is a complete HF model directory: transformers loads its model and its tokenizer from it; and a
save is atomic: ``latest`` names a complete checkpoint at every instant, files are fsynced before they are
published, and a kill while step-N is replaced leaves the old or the new one whole."""

import json
import os
import shutil
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.rl.config import ObjectiveConfig
from fireflash.training.checkpoint import latest_checkpoint, save_checkpoint
from fireflash.training.config import TrainerConfig
from fireflash.training.trainer import Trainer

pytestmark = pytest.mark.unit


def test_checkpoint_loads_as_a_model_directory_with_its_tokenizer(tmp_path):
    tok = build_tiny_tokenizer()
    model = build_tiny_model(len(tok))
    trainer = Trainer(model, tok, TrainerConfig(), ObjectiveConfig(), temperature=1.0)
    path = trainer.save_checkpoint(tmp_path, cursor={})
    assert (path / "tokenizer.json").is_file() and (path / "tokenizer_config.json").is_file()

    loaded_tok = AutoTokenizer.from_pretrained(path)
    text = '<|im_start|>user\necho hello > /app/hello.txt<|im_end|>\n'
    assert loaded_tok(text)["input_ids"] == tok(text)["input_ids"]
    assert (loaded_tok.eos_token, loaded_tok.pad_token_id, len(loaded_tok)) == (tok.eos_token, tok.pad_token_id, len(tok))
    chat = [{"role": "user", "content": "hi"}]
    assert loaded_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == tok.apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True)

    loaded = AutoModelForCausalLM.from_pretrained(path)
    ids = torch.tensor([tok.encode("echo hello")])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


# ───────── atomic saves: `latest` names a complete checkpoint at every instant, even while step-N is replaced ─────────

_MUTATORS = [(os, "replace"), (os, "rename"), (os, "unlink"), (os, "remove"), (os, "rmdir"), (shutil, "rmtree")]


class _Killed(BaseException):
    """A simulated kill -9 at a filesystem call (BaseException: rmtree(ignore_errors=True) must not swallow it)."""


def _versions(tmp_path):
    """Save step 1 as 'old' into a fresh root, then move the weights; returns (root, model, optimizer, old, new)
    where old / new are the weights each save of step 1 holds."""
    model = build_tiny_model(97, hidden_size=16, num_layers=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    root = tmp_path / "checkpoints"
    save_checkpoint(root, 1, model, None, optimizer, 1, {"v": "old"}, keep=2)
    old = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    return root, model, optimizer, old, {k: v.clone() for k, v in model.state_dict().items()}


def _complete_version(path, old, new):
    """'old' or 'new': which save of step 1 the directory ``path`` holds, asserting it is all of that one."""
    meta = json.loads((path / "fireflash.json").read_text())
    assert (path / "trainer_state.pt").is_file() and (path / "config.json").is_file(), sorted(os.listdir(path))
    expected = {"old": old, "new": new}[meta["cursor"]["v"]]
    weights = load_file(path / "model.safetensors")
    for name, value in weights.items():
        assert torch.equal(value, expected[name]), f"{path.name} mixes saves at {name}"
    return meta["cursor"]["v"]


def _check(root, old, new):
    """What any reader may see at this instant: ``latest`` loads a complete checkpoint, and a visible
    ``step-000001`` is complete (old or new) or absent."""
    _complete_version(latest_checkpoint(root), old, new)
    if (root / "step-000001").exists():
        _complete_version(root / "step-000001", old, new)


def test_replacing_a_step_keeps_latest_complete_at_every_filesystem_call(tmp_path, monkeypatch):
    root, model, optimizer, old, new = _versions(tmp_path)
    calls = []

    def watch(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            calls.append(name)
            _check(root, old, new)
            try:
                return real(*args, **kwargs)
            finally:
                _check(root, old, new)

        monkeypatch.setattr(module, name, call)

    for module, name in _MUTATORS:
        watch(module, name)
    save_checkpoint(root, 1, model, None, optimizer, 2, {"v": "new"}, keep=2)
    monkeypatch.undo()
    assert "replace" in calls and _complete_version(latest_checkpoint(root), old, new) == "new"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000001"]  # nothing left behind


def test_a_kill_at_any_filesystem_call_of_a_replace_leaves_old_or_new(tmp_path, monkeypatch):
    """Kill the save at its k-th filesystem call, for every k: the old or the new checkpoint survives whole,
    and the next save (the resumed run's) succeeds and cleans up."""
    n_calls, seen = None, set()
    for k in range(200):
        root, model, optimizer, old, new = _versions(tmp_path / str(k))
        count = [0]

        def kill_at(module, name, count=count, k=k):
            real = getattr(module, name)

            def call(*args, **kwargs):
                count[0] += 1
                if count[0] == k + 1:
                    raise _Killed(f"{name}{args}")
                return real(*args, **kwargs)

            monkeypatch.setattr(module, name, call)

        for module, name in _MUTATORS:
            kill_at(module, name)
        try:
            save_checkpoint(root, 1, model, None, optimizer, 2, {"v": "new"}, keep=2)
            n_calls = count[0]
        except _Killed:
            pass
        monkeypatch.undo()
        if n_calls is not None:
            break
        seen.add(_complete_version(latest_checkpoint(root), old, new))
        _check(root, old, new)
        save_checkpoint(root, 1, model, None, optimizer, 2, {"v": "new"}, keep=2)  # the resumed run saves again
        assert _complete_version(latest_checkpoint(root), old, new) == "new"
        assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000001"]
    assert n_calls is not None and n_calls >= 3, "every filesystem call of a replace was tried"
    assert seen == {"old", "new"}  # kills early keep the old one, kills after the swap the new one


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fd paths from /proc/self/fd")
def test_files_and_directories_are_fsynced_before_the_renames_that_publish_them(tmp_path, monkeypatch):
    model = build_tiny_model(97)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    root = tmp_path / "checkpoints"
    root.mkdir()
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst, **kwargs):
        events.append(("replace", str(src), str(dst)))
        return real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    final = save_checkpoint(root, 1, model, None, optimizer, 1, {}, keep=2)
    monkeypatch.undo()
    staged = str(root / ".step-000001.tmp")
    publish = events.index(("replace", staged, str(final)))
    synced = {e[1] for e in events[:publish] if e[0] == "fsync"}
    written = {str(p).replace(str(final), staged) for p in [final, *final.rglob("*")]}
    assert written <= synced, f"not fsynced before the rename: {sorted(written - synced)}"
    repoint = events.index(("replace", str(root / ".latest.tmp"), str(root / "latest")))
    assert ("fsync", str(root / ".latest.tmp")) in events[publish:repoint]  # the pointer's content
    assert ("fsync", str(root)) in events[publish:repoint]  # the directory entry of the new step
    assert ("fsync", str(root)) in events[repoint:]  # the pointer's directory entry
    assert [e for e in events if e[0] == "replace" and e[2] == str(root / "latest")] == [events[repoint]]
