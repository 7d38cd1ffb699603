"""A tiny Llama written as a GGUF file by the `gguf` package's own writer: 2 layers, hidden
32, grouped-query attention, a 320-token byte-level BPE vocabulary with a ChatML template,
fp32 tensors. Also the Hugging Face model it was written from, to compare weights with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from hf_testlib import CHAT_TEMPLATE, SPECIAL, build_tokenizer, gsm8k_rows


def permute_for_gguf(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf.py `LlamaModel.permute`): within each
    head, the rotary halves are interleaved; transformers undoes it when it reads a file."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def tiny_llama(seed: int = 0):
    """(a random 2-layer LlamaForCausalLM with untied output, its tokenizer)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    texts = [r["question"] + " " + r["answer"] for r in gsm8k_rows(50)]
    tokenizer = build_tokenizer(texts, CHAT_TEMPLATE)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval(), tokenizer


def write_tiny_gguf(path: Path, seed: int = 0):
    """Write the tiny Llama to `path` as GGUF (fp32 tensors); returns (model, tokenizer)."""
    import gguf

    model, tokenizer = tiny_llama(seed)
    c = model.config
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_name("tiny-llama-test")
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(c.vocab_size)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL else 1 for t in tokens])  # 3: control
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(c.bos_token_id)
    writer.add_eos_token_id(c.eos_token_id)
    writer.add_pad_token_id(c.pad_token_id)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, value in _gguf_tensors(model).items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tokenizer


def _gguf_tensors(model) -> dict[str, np.ndarray]:
    """The model's weights under llama.cpp's tensor names, q and k rows permuted."""
    c = model.config
    w = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = {
        "token_embd.weight": w["model.embed_tokens.weight"],
        "output_norm.weight": w["model.norm.weight"],
        "output.weight": w["lm_head.weight"],
    }
    names = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    for i in range(c.num_hidden_layers):
        layer = f"model.layers.{i}"
        for gguf_name, hf_name in names.items():
            out[f"blk.{i}.{gguf_name}.weight"] = w[f"{layer}.{hf_name}.weight"]
        q, k = w[f"{layer}.self_attn.q_proj.weight"], w[f"{layer}.self_attn.k_proj.weight"]
        out[f"blk.{i}.attn_q.weight"] = permute_for_gguf(q, c.num_attention_heads)
        out[f"blk.{i}.attn_k.weight"] = permute_for_gguf(k, c.num_key_value_heads)
    return out
