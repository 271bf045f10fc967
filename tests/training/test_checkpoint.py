"""A checkpoint is a complete HF model directory: transformers loads its model and its tokenizer from it."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fireflash.models import build_tiny_model, build_tiny_tokenizer
from fireflash.rl.config import ObjectiveConfig
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
