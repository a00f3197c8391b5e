#!/usr/bin/env python3
"""Fallback for `clefserve make-model --preset flash` while it is not implemented: writes a Clef-flash-shaped
release folder with random weights (HF-style init: normal(0, 0.02) linears/embeddings, RMSNorm(1+w) weights 0,
A_log = log(U(1, 16)), dt_bias 1, head LayerNorms 1/0, head biases and scalars 0), sharded safetensors with an
index, the joint head (tensor names taken from the tiny golden release, dims scaled to flash), and the Qwen3
tokenizer from tests/golden. Runs on the device (torch, GPU RNG); never commit its output."""
import json, math, os, struct, sys
import torch
from safetensors.torch import save_file

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
tiny = os.path.join(root, "tests/golden/models/tiny-r2")
os.makedirs(out, exist_ok=True)
g = torch.Generator(device="cuda").manual_seed(seed)
torch.manual_seed(seed)
H, L, I, V = 4096, 32, 12288, 248320
nh, nkv, hd = 16, 4, 256
Hk, Hv, dk, dv, K = 16, 32, 128, 128, 4

def normal(*shape):
    return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
def const(v, *shape):
    return torch.full(shape, v, dtype=torch.bfloat16)

cfg = json.load(open(os.path.join(tiny, "config.json")))
tc = cfg["text_config"]
layer_types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)]
tc.update(dict(hidden_size=H, num_hidden_layers=L, intermediate_size=I, num_attention_heads=nh,
               num_key_value_heads=nkv, head_dim=hd, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
               linear_key_head_dim=dk, linear_value_head_dim=dv, linear_conv_kernel_dim=K, vocab_size=V,
               layer_types=layer_types, initializer_range=0.02))
mrope = [11, 11, 10]
tc["mrope_section"] = mrope
tc["rope_parameters"]["mrope_section"] = mrope
cfg["text_config"] = tc
cfg["vision_config"]["out_hidden_size"] = H
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)

pre = "model.language_model."
shards, cur, cur_bytes, index = [], {}, 0, {}
def flush():
    global cur, cur_bytes
    if cur:
        shards.append(cur)
        cur, cur_bytes = {}, 0
def add(name, t):
    global cur_bytes
    cur[name] = t.contiguous()
    cur_bytes += t.numel() * t.element_size()
    if cur_bytes > 4 << 30:
        flush()

add(pre + "embed_tokens.weight", normal(V, H))
for i in range(L):
    p = f"{pre}layers.{i}."
    add(p + "input_layernorm.weight", const(0.0, H))
    add(p + "post_attention_layernorm.weight", const(0.0, H))
    add(p + "mlp.gate_proj.weight", normal(I, H))
    add(p + "mlp.up_proj.weight", normal(I, H))
    add(p + "mlp.down_proj.weight", normal(H, I))
    if layer_types[i] == "linear_attention":
        a = p + "linear_attn."
        add(a + "in_proj_qkv.weight", normal(2 * Hk * dk + Hv * dv, H))
        add(a + "in_proj_z.weight", normal(Hv * dv, H))
        add(a + "in_proj_b.weight", normal(Hv, H))
        add(a + "in_proj_a.weight", normal(Hv, H))
        add(a + "conv1d.weight", normal(2 * Hk * dk + Hv * dv, 1, K))
        add(a + "dt_bias", const(1.0, Hv))
        add(a + "A_log", torch.log(torch.empty(Hv).uniform_(1, 16, generator=None)).to(torch.bfloat16))
        add(a + "norm.weight", const(1.0, dv))
        add(a + "out_proj.weight", normal(H, Hv * dv))
    else:
        a = p + "self_attn."
        add(a + "q_proj.weight", normal(nh * 2 * hd, H))
        add(a + "k_proj.weight", normal(nkv * hd, H))
        add(a + "v_proj.weight", normal(nkv * hd, H))
        add(a + "q_norm.weight", const(0.0, hd))
        add(a + "k_norm.weight", const(0.0, hd))
        add(a + "o_proj.weight", normal(H, nh * hd))
add(pre + "norm.weight", const(0.0, H))
add("lm_head.weight", normal(V, H))
flush()
n = len(shards)
total = 0
for s, tensors in enumerate(shards):
    fn = f"model-{s + 1:05d}-of-{n:05d}.safetensors"
    save_file(tensors, os.path.join(out, fn), metadata={"format": "pt"})
    for k, t in tensors.items():
        index[k] = fn
        total += t.numel() * t.element_size()
    print(f"wrote {fn}", flush=True)
json.dump({"metadata": {"total_size": total}, "weight_map": index},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)

# Joint head: names and shapes from the tiny release (D=64, W=32, F=64) scaled to flash (D=4096, W=1024, F=4096).
hc = json.load(open(os.path.join(tiny, "joint_head_config.json")))
D, W, F = 4096, 1024, 4096
dim_map = {hc["hidden_size"]: D, hc["width"]: W, 3 * hc["width"]: 3 * W, 4 * hc["width"]: 4 * W, 1: 1, 3: 3}
assert hc["feedforward"] == hc["hidden_size"]  # so the map above is unambiguous (F = D in both)
with open(os.path.join(tiny, "joint_head.safetensors"), "rb") as f:
    hdr = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
items = [(k, v) for k, v in hdr.items() if k != "__metadata__"]
n_layers = 4  # Clef-flash's decoder depth; tiny has 2: layers.2/3 reuse the shapes of layers.0
items += [(k.replace("layers.0.", f"layers.{j}.", 1), v) for j in range(hc["layers"], n_layers)
          for k, v in hdr.items() if k.startswith("layers.0.")]
head = {}
for name, info in items:
    shape = [dim_map[d] for d in info["shape"]]
    if len(shape) == 0:
        head[name] = torch.zeros((), dtype=torch.bfloat16)
    elif name.endswith("norm.weight"):
        head[name] = const(1.0, *shape)
    elif name.endswith("bias"):
        head[name] = const(0.0, *shape)
    else:
        head[name] = normal(*shape)
save_file(head, os.path.join(out, "joint_head.safetensors"), metadata={"format": "pt"})
json.dump({"hidden_size": D, "width": W, "routing_layers": hc["routing_layers"], "layers": n_layers,
           "heads": 16, "feedforward": F}, open(os.path.join(out, "joint_head_config.json"), "w"))
for fn in ("tokenizer.json", "tokenizer_config.json"):
    src = os.path.join(root, "tests/golden/tokenizers/qwen3", fn)
    with open(src, "rb") as a, open(os.path.join(out, fn), "wb") as b:
        b.write(a.read())
print(f"flash-shaped release in {out}: {total / 1e9:.1f} GB backbone, {len(head)} head tensors", flush=True)
