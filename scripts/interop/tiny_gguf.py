"""Writes a tiny llama-architecture GGUF model with random weights, for wire-format tests.

Usage: python tiny_gguf.py OUT.gguf

The model is 2 layers of width 64 over a byte-level vocabulary (5 special tokens, 256 byte
tokens, space and printable ASCII), with a fixed seed, so the same file comes out every time.
Its answers are noise, but grammar-constrained sampling (JSON schemas, forced tool calls)
still yields well-formed JSON: what `cargo xtask interop` checks is the wire format of real
OpenAI-compatible servers, not the model.

The chat template reads `content` as text, as common ChatML templates do: an assistant
message sent with `"content": null` fails to render, which is how llama.cpp's server answers
500 to clients that send null.
"""

import sys

import numpy as np
from gguf import GGUFWriter, TokenType

CHAT_TEMPLATE = """{%- if tools %}
{{- '<|im_start|>system\\nYou may call these tools:\\n' }}
{%- for tool in tools %}
{{- tool['function']['name'] + ': ' + (tool['function']['parameters'] | tojson) + '\\n' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'assistant' and message['tool_calls'] %}
{{- '<|im_start|>assistant\\n' + message['content'] }}
{%- for call in message['tool_calls'] %}
{{- '<tool_call>' + call['function']['name'] + ' ' + call['function']['arguments'] + '</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

EMBED = 64
LAYERS = 2
FFN = 128
HEADS = 4


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [TokenType.UNKNOWN] + [TokenType.CONTROL] * 4
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    tokens.append("\u2581")  # SentencePiece's space
    types.append(TokenType.NORMAL)
    tokens += [chr(c) for c in range(33, 127)]
    types += [TokenType.NORMAL] * (127 - 33)
    return tokens, types


def main(out):
    tokens, types = vocabulary()
    rng = np.random.default_rng(20261124)

    def weights(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w = GGUFWriter(out, "llama")
    w.add_name("effect-agents interop tiny model")
    w.add_context_length(4096)
    w.add_embedding_length(EMBED)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(EMBED // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    vocab = len(tokens)
    w.add_tensor("token_embd.weight", weights(vocab, EMBED))
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBED, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(EMBED, EMBED))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBED, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weights(FFN, EMBED))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weights(FFN, EMBED))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weights(EMBED, FFN))
    w.add_tensor("output_norm.weight", np.ones(EMBED, dtype=np.float32))
    w.add_tensor("output.weight", weights(vocab, EMBED))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_gguf.py OUT.gguf")
    main(sys.argv[1])
