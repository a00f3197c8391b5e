#!/usr/bin/env python3
"""HF check and backbone parity on the device:
loads the release folder with transformers' Qwen3_5ForConditionalGeneration (bf16, GPU), runs the text
backbone on the given ids and compares its last_hidden_state with ours (float32 dump from
`clefserve profile --dump-hidden`): relative L2 error, bf16 vs bf16.
usage: hf_parity.py MODEL_DIR IDS_FILE OURS.f32 [OURS2.f32 ...]"""
import sys, time
import numpy as np
import torch
import transformers
from transformers import Qwen3_5ForConditionalGeneration

model_dir, ids_file = sys.argv[1], sys.argv[2]
t0 = time.time()
m = Qwen3_5ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.bfloat16, device_map="cuda")
m.eval()
print(f"HF check: Qwen3_5ForConditionalGeneration.from_pretrained({model_dir}) loaded OK "
      f"(transformers {transformers.__version__}, torch {torch.__version__}, {time.time() - t0:.1f}s)", flush=True)
ids = [int(x) for x in open(ids_file).read().split()]
lm = m.model.language_model if hasattr(m.model, "language_model") else m.model
with torch.no_grad():
    out = lm(input_ids=torch.tensor([ids], device="cuda"))
ref = out.last_hidden_state[0].float().cpu().numpy()
print(f"HF last_hidden_state shape {ref.shape}, |ref| max {np.abs(ref).max():.4g}")
for path in sys.argv[3:]:
    ours = np.fromfile(path, dtype=np.float32).reshape(ref.shape)
    err = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    row_err = np.linalg.norm(ours - ref, axis=1) / np.linalg.norm(ref, axis=1)
    print(f"PARITY {path}: rel L2 {err:.4g} (per-token max {row_err.max():.4g}, median {np.median(row_err):.4g}), "
          f"max abs {np.abs(ours - ref).max():.4g}, finite {np.isfinite(ours).all()}")
