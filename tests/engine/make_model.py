"""Make the engine tests' model on this machine, with no hub: a tiny random Llama, its tokenizer
and one LoRA adapter for it. Run with a kit venv's interpreter (scripts/testtools/vllm-kit.sh:
it has transformers, tokenizers, peft and safetensors at the line's own versions, so the files
are what that line's vLLM reads):

    <kit>/bin/python tests/engine/make_model.py OUT_DIR

writes OUT_DIR/model (config.json, generation_config.json, tokenizer.json, tokenizer_config.json
with a ChatML chat template, model.safetensors in bf16) and OUT_DIR/adapter (a peft LoRA:
adapter_config.json, adapter_model.safetensors), then OUT_DIR/.complete. The weights are random
but fixed by the seed; the tokenizer is a byte-level BPE trained here on the text below.

Why these sizes: head size 64 (hidden 256 / 4 heads) is one vLLM's CPU attention supports;
max_position_embeddings 2048 is the context vLLM takes when the rendered server names no
--max-model-len (it names none), small enough for the CPU KV cache the test gives it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 31
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Any text will do for a random model; this keeps the vocabulary to words a chat test sends.
CORPUS = [
    "Hello, how are you today? I am fine, thank you. What is the weather like?",
    "The quick brown fox jumps over the lazy dog. A model answers questions about text.",
    "Say hello. Count to ten: one two three four five six seven eight nine ten.",
    "You are a helpful assistant. The user asks a question and the assistant replies.",
    "Kubernetes runs pods; a server loads weights and serves chat completions over HTTP.",
] * 20


def tokenizer() -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(CORPUS, trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=None, eos_token="<|im_end|>",
                                      pad_token="<|endoftext|>", model_max_length=2048)
    wrapped.chat_template = CHATML
    return wrapped


def model(vocab_size: int, eos_id: int, pad_id: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None, tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    return LlamaForCausalLM(config).to(torch.bfloat16)


def main(out: Path) -> None:
    base, adapter = out / "model", out / "adapter"
    tok = tokenizer()
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    llama = model(len(tok), eos, pad)
    llama.save_pretrained(base, safe_serialization=True)
    tok.save_pretrained(base)
    # transformers 5 writes the template to chat_template.jinja, 4.x into tokenizer_config.json:
    # both lines' vLLM read either; assert it landed somewhere.
    saved = json.loads((base / "tokenizer_config.json").read_text())
    assert "chat_template" in saved or (base / "chat_template.jinja").exists(), "no chat template saved"
    # The adapter: rank 8 (the smallest rank both lines' --max-lora-rank accept), on the
    # attention projections, with random B so that it changes the output (peft's default B=0
    # would make it a no-op).
    lora = get_peft_model(llama, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    lora.save_pretrained(adapter, safe_serialization=True)
    (out / ".complete").write_text("ok\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
