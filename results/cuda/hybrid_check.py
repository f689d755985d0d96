"""Hybrid (qwen3_next / qwen3_5) engine checks on the accelerator, fp32 and bf16: run from the
repository root (`python results/cuda/hybrid_check.py`, OUT=DIR), writes DIR/hybrid_check.json."""
import json, sys, time
from pathlib import Path
sys.path[:0] = [".", "tests"]
import numpy as np, torch
from transformers import DynamicCache
from gpu.engine import Engine
from gpu.plan import Plan
import test_gpu_hybrid as th

dev = "cuda" if torch.cuda.is_available() else "cpu"
res = []

def maxabs(a, b):
    return float((a.float() - b.float()).abs().max())

def cache_diff(a, b):
    m = 0.0
    for la, lb in zip(a.layers, b.layers):
        if hasattr(la, "recurrent_states"):
            m = max(m, maxabs(la.recurrent_states[0], lb.recurrent_states[0]), maxabs(la.conv_states[0], lb.conv_states[0]))
        else:
            m = max(m, maxabs(la.keys, lb.keys), maxabs(la.values, lb.values))
    return m

with torch.inference_mode():
    for fam in th.FAMILIES:
        for dt in (torch.float32, torch.bfloat16):
            t0 = time.time()
            model = th.hybrid_model(fam, seed=1).to(dev, dt)
            N, L = 96, th.L
            ids = th.ids_for(N, 3).to(dev)
            stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
            r = {"family": fam, "dtype": str(dt), "device": dev}
            eng = Engine(model)
            off = eng.prefill(ids, None, "exact")
            r["fill_off_bitwise"] = bool(torch.equal(off.logits, stock.logits[0]))
            for split in (1, 2):
                cache = DynamicCache(config=model.config)
                x, _ = eng.lower(ids, split, cache)
                rows = torch.arange(N, device=dev)
                h = eng.late(x, x, rows, rows[:0], cache, "exact", base=0, split=split)
                lg = eng.adapter.logits(h)[0]
                r[f"late_all_exact_split{split}_logits_max_abs"] = maxabs(lg, stock.logits[0])
                r[f"late_all_exact_split{split}_bitwise"] = bool(torch.equal(lg, stock.logits[0]))
                r[f"late_all_exact_split{split}_cache_max_abs"] = cache_diff(cache, stock.past_key_values)
            plan = Plan(N, 1, 16, L, np.array([3, 11, 20, 40]))
            class Eye:
                split = 1
                def predict(self, l, x):
                    return torch.nn.functional.linear(x, torch.eye(th.D, device=dev, dtype=dt), torch.zeros(th.D, device=dev, dtype=dt))
            ident = Engine(model).prefill(ids, plan, "identity")
            eye = Engine(model, Eye()).prefill(ids, plan, "ridge")
            r["identity_equals_ridge_eye_bitwise"] = bool(torch.equal(ident.logits, eye.logits))
            # correction: true DeltaM at layer 2, split 1
            S, layer, T = 1, 2, 16
            n_p = N - T
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
            mp = th.near_identity_maps(S, seed=4, noise=0.6)
            maps = th.DenseMaps(S, mp)
            maps.t = {l: (A.to(dev, dt), b.to(dev, dt)) for l, (A, b) in maps.t.items()}
            x_true, x_hat = hs[layer], maps.predict(layer, hs[S])
            dM = (th.stock_states(model, layer, x_true[:, :n_p]).recurrent_states[0]
                  - th.stock_states(model, layer, x_hat[:, :n_p]).recurrent_states[0])[0]
            ex = th.stock_states(model, layer, x_true).recurrent_states[0]
            e2 = Engine(model, maps)
            for rows_e in ([], [1, 5, 6]):
                p = Plan(N, S, T, L, np.array(rows_e, np.int64))
                plain = e2.prefill(ids, p, "ridge")
                fixed = e2.prefill(ids, p, "ridge", correction={layer: dM})
                ep = float((plain.cache.layers[layer].recurrent_states[0] - ex).norm())
                ef = float((fixed.cache.layers[layer].recurrent_states[0] - ex).norm())
                rho = fixed.info["rho"][layer]
                r[f"correction_exact_rows{len(rows_e)}"] = {"err_plain": ep, "err_corrected": ef, "rho": rho}
                tok = e2.decode(fixed, 4)
            # decode after all-exact late path vs after stock prefill
            cache = DynamicCache(config=model.config)
            x, _ = eng.lower(ids, 1, cache)
            rows = torch.arange(N, device=dev)
            h = eng.late(x, x, rows, rows[:0], cache, "exact", base=0, split=1)
            def greedy(cache, logits, k=6):
                toks = []
                for _ in range(k):
                    t = int(logits.argmax()); toks.append(t)
                    logits = model(input_ids=torch.tensor([[t]], device=dev), cache=cache, use_cache=True).logits[0, -1]
                return toks
            st2 = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
            r["decode_same_tokens"] = greedy(cache, eng.adapter.logits(h)[0, -1]) == greedy(st2.past_key_values, st2.logits[0, -1])
            r["seconds"] = time.time() - t0
            res.append(r)
            print(json.dumps(r), flush=True)
info = {"torch": torch.__version__, "device_name": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "results": res}
import os
out = Path(os.environ.get("OUT", "/tmp/hyb_out")); out.mkdir(parents=True, exist_ok=True)
(out / "hybrid_check.json").write_text(json.dumps(info, indent=2))
