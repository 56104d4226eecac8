"""Make the engine tests' model on this machine, with no hub: a tiny Llama trained to fixed answers, its tokenizer
and one LoRA adapter for it. Run with a kit venv's interpreter (scripts/testtools/vllm-kit.sh:
it has transformers, tokenizers, peft and safetensors at the line's own versions, so the files
are what that line's vLLM reads):

    <kit>/bin/python scripts/localmodel/make_model.py OUT_DIR

writes OUT_DIR/model (config.json, generation_config.json, tokenizer.json, tokenizer_config.json
with a ChatML chat template, model.safetensors in bf16) and OUT_DIR/adapter (a peft LoRA:
adapter_config.json, adapter_model.safetensors), then OUT_DIR/.complete. The tokenizer is a
byte-level BPE trained here on the text below; the weights start random (fixed by the seed) and are
then trained, in a few seconds, to give the answers in ANSWERS (the adapter: ADAPTER_ANSWERS).

Why trained and not left random: a random model never ends an answer (its end-of-answer token is
one of 512 near-equal choices), and pylon's canary (`1+1=`, up to 237 tokens, temperature 0.7)
counts an answer that uses every token it may as runaway generation and takes the server out of
routing. A real model answers `2` and stops; so does this one, with and without its adapter, and
with a lead wide enough that sampling at the canary's temperature picks the same (CANARY_LEAD).

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
# The tokenizer's text; this keeps the vocabulary to words a chat test sends.
CORPUS = [
    "Hello, how are you today? I am fine, thank you. What is the weather like?",
    "The quick brown fox jumps over the lazy dog. A model answers questions about text.",
    "Say hello. Count to ten: one two three four five six seven eight nine ten.",
    "You are a helpful assistant. The user asks a question and the assistant replies.",
    "Kubernetes runs pods; a server loads weights and serves chat completions over HTTP.",
] * 20

# What the tests and pylon ask (the user turn) and what the model answers. "Say hello." is the
# tests' prompt: its answer is longer than any test's max_tokens without ignore_eos (16), so
# those end on `length`. "1+1=" is pylon's canary (pylon-lib bringup/upstream.rs).
ANSWERS = [
    ("1+1=", "2"),
    ("Say hello.", "Hello, how are you today? I am fine, thank you. The quick brown fox jumps over the "
                   "lazy dog. Count to ten: one two three four five six seven eight nine ten."),
    ("Hi", "Hello, how are you today?"),
]
# The adapter answers the tests' prompt with other words from its first token on (the tests tell
# the two apart by their text) and the canary the same.
ADAPTER_ANSWERS = [
    ("1+1=", "2"),
    ("Say hello.", "Kubernetes runs pods; a server loads weights and serves chat completions."),
]
# Trained until every answer token's logit leads the next-best one's by LEAD (greedy answers as
# written, whatever rounding bf16 adds); then the output layer is scaled (every logit times the
# same factor: the same greedy answers) until the canary's answer leads by CANARY_LEAD, which at
# pylon's temperature 0.7 leaves each other token a chance below e^-21 a step. Training alone gets
# there only slowly (cross-entropy's pull fades as the loss falls: ~9 after 400 steps). The adapter
# cannot scale the output layer (it adapts the projections only): it trains to the canary's lead.
LEAD = 4.0
CANARY_LEAD = 15.0
MAX_STEPS = 1000


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
    return LlamaForCausalLM(config)


def examples(tok: PreTrainedTokenizerFast, answers: list[tuple[str, str]]) -> list[tuple[torch.Tensor, int]]:
    """Each answer as vLLM will see it: the chat template's prompt (with the generation prompt),
    the answer, the end-of-answer token; with where the answer starts."""
    out = []
    for question, answer in answers:
        prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
        start = len(tok(prompt, add_special_tokens=False)["input_ids"])
        ids = tok(prompt + answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert ids[:start] == tok(prompt, add_special_tokens=False)["input_ids"], "answer merged into the prompt"
        out.append((torch.tensor([ids]), start))
    return out


def leads(llama: torch.nn.Module, batch: list[tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
    """Per example, per answer token: its logit minus the best other token's (> 0: greedy picks it)."""
    found = []
    for ids, start in batch:
        logits = llama(input_ids=ids).logits[0, start - 1:-1].float()
        target = ids[0, start:]
        right = logits.gather(1, target[:, None])[:, 0]
        others = logits.scatter(1, target[:, None], float("-inf")).max(dim=1).values
        found.append(right - others)
    return found


def train(llama: torch.nn.Module, batch: list[tuple[torch.Tensor, int]], needs: list[float], what: str) -> None:
    """Adam on the trainable parameters until each example's answer tokens all lead by its need:
    cross-entropy, plus a hinge on any token still short of its need."""
    params = [p for p in llama.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=3e-3)
    for _ in range(MAX_STEPS):
        optimizer.zero_grad()
        found = leads(llama, batch)
        if all(lead.min() >= need for lead, need in zip(found, needs, strict=True)):
            return
        loss = sum(torch.nn.functional.cross_entropy(llama(input_ids=ids).logits[0, start - 1:-1], ids[0, start:])
                   for ids, start in batch)
        loss = loss + sum(torch.relu(need - lead).sum() for lead, need in zip(found, needs, strict=True))
        loss.backward()
        optimizer.step()
    least = [round(lead.min().item(), 1) for lead in found]
    raise SystemExit(f"{what}: its answers lead by {least} after {MAX_STEPS} steps, not {needs}")


def canary_lead(llama: torch.nn.Module, tok: PreTrainedTokenizerFast, answers: list[tuple[str, str]]) -> float:
    with torch.no_grad():
        return leads(llama, examples(tok, answers[:1]))[0].min().item()


def main(out: Path) -> None:
    base, adapter = out / "model", out / "adapter"
    tok = tokenizer()
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    llama = model(len(tok), eos, pad)
    train(llama, examples(tok, ANSWERS), [LEAD] * len(ANSWERS), "the model")
    with torch.no_grad():
        llama.lm_head.weight.mul_(CANARY_LEAD / canary_lead(llama, tok, ANSWERS) * 1.1)
    llama.to(torch.bfloat16)
    assert canary_lead(llama, tok, ANSWERS) >= CANARY_LEAD, "the canary's answer lost its lead in bf16"
    llama.save_pretrained(base, safe_serialization=True)
    tok.save_pretrained(base)
    # transformers 5 writes the template to chat_template.jinja, 4.x into tokenizer_config.json:
    # both lines' vLLM read either; assert it landed somewhere.
    saved = json.loads((base / "tokenizer_config.json").read_text())
    assert "chat_template" in saved or (base / "chat_template.jinja").exists(), "no chat template saved"
    # The adapter: rank 8 (the smallest rank both lines' --max-lora-rank accept), on the
    # attention and MLP projections (q and v alone could not learn its answers), trained with the
    # base frozen.
    llama.float()
    lora = get_peft_model(llama, LoraConfig(r=8, lora_alpha=16, task_type="CAUSAL_LM", target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    # The canary keeps its lead through the adapter's training (a hinge on it: without one it fell
    # below CANARY_LEAD); the bf16 rounding after training costs a little of it.
    train(lora, examples(tok, ADAPTER_ANSWERS), [CANARY_LEAD * 1.1] + [LEAD] * (len(ADAPTER_ANSWERS) - 1),
          "the adapter")
    lora.to(torch.bfloat16)
    assert canary_lead(lora, tok, ADAPTER_ANSWERS) >= CANARY_LEAD, "the adapter's canary answer lost its lead"
    lora.save_pretrained(adapter, safe_serialization=True)
    (out / ".complete").write_text("ok\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
