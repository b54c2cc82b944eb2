"""The served model: a Llama-style decoder from a transformers config, random weights.

transformers' LlamaForCausalLM makes and initialises the weights (random, no
download); the forward pass here is our own, because serving needs what the
library's generate() does not give: a static KV cache with one row per slot,
each slot at its own position, and the decode step of all slots captured in
one CUDA graph (as vLLM and SGLang do). selfcheck() compares its greedy
tokens with the library's own forward pass, teacher-forced.
"""
import time

import torch
import torch.nn.functional as F

# The shape of Llama 3.2 1B (1.24 B parameters, embeddings tied), with
# plain RoPE (no long-context scaling: prompts here are 512 tokens).
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=8192,
                rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=500000.0)
TINY = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
            rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0)


def make_hf(shape, seed, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**shape)
    torch.manual_seed(seed)
    with torch.device(device):
        hf = LlamaForCausalLM(cfg)
    # RoPE frequencies are taken in float32, before the cast below.
    rot = getattr(hf.model, "rotary_emb", None)
    if rot is not None and hasattr(rot, "inv_freq"):
        inv_freq = rot.inv_freq.detach().float().clone()
        scaling = float(getattr(rot, "attention_scaling", 1.0))
    else:
        hd = shape["head_dim"]
        inv_freq = 1.0 / (shape["rope_theta"] ** (torch.arange(0, hd, 2, device=device).float() / hd))
        scaling = 1.0
    hf.to(dtype).eval()
    return hf, cfg, inv_freq, scaling


class Model:
    def __init__(self, shape=LLAMA_1B, slots=32, max_len=640, prompt_len=512, device="cuda",
                 dtype=torch.bfloat16, graph=True, seed=0, keep_hf=False):
        t = time.perf_counter()
        self.hf, cfg, inv_freq, scaling = make_hf(shape, seed, device, dtype)
        self.params = sum(p.numel() for p in self.hf.parameters())
        sd = self.hf.state_dict()
        self.device, self.dtype = torch.device(device), dtype
        self.B, self.L, self.T = slots, max_len, prompt_len
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, shape["head_dim"]
        self.group = self.nh // self.nkv
        self.eps = cfg.rms_norm_eps
        self.vocab = cfg.vocab_size
        self.embed = sd["model.embed_tokens.weight"]
        self.norm = sd["model.norm.weight"]
        self.lm_head = sd.get("lm_head.weight", self.embed)
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = "model.layers.%d." % i
            self.layers.append(dict(
                ln1=sd[p + "input_layernorm.weight"],
                ln2=sd[p + "post_attention_layernorm.weight"],
                # q, k and v in one matrix product, gate and up in another (fewer launches)
                wqkv=torch.cat([sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"],
                                sd[p + "self_attn.v_proj.weight"]]).contiguous(),
                wo=sd[p + "self_attn.o_proj.weight"],
                w13=torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]).contiguous(),
                w2=sd[p + "mlp.down_proj.weight"],
            ))
        if not keep_hf:
            # The merged copies above stand in for the library's q/k/v and
            # gate/up weights; only selfcheck runs the library's forward.
            del sd
            self.hf = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        n = len(self.layers)
        kv = (self.B, self.nkv, self.L, self.hd)
        self.kcache = [torch.zeros(kv, device=device, dtype=dtype) for _ in range(n)]
        self.vcache = [torch.zeros(kv, device=device, dtype=dtype) for _ in range(n)]
        pos = torch.arange(self.L, device=device, dtype=torch.float32)
        freqs = torch.outer(pos, inv_freq.to(device))
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = (emb.cos() * scaling).to(dtype)
        self.sin = (emb.sin() * scaling).to(dtype)
        self.slot_ids = torch.arange(self.B, device=device)
        self.key_ids = torch.arange(self.L, device=device)
        # Decode-step state, static for the graph: each slot's last token and its position.
        self.tok = torch.zeros(self.B, dtype=torch.long, device=device)
        self.pos = torch.zeros(self.B, dtype=torch.long, device=device)
        self.out = torch.zeros(self.B, dtype=torch.long, device=device)
        self.graph = None
        if graph and self.device.type == "cuda":
            self._capture()
        # busy_s: the device time of this server's own work, summed over its
        # prefills and decode steps (CUDA events around each, read once the
        # step's token is on the host). Alone on the GPU it is the server's
        # busy time; beside another context it also counts the time slices
        # that context took inside a step.
        # steps: (kind, device span s, host wall s, issue s, start s) per
        # call, kind "prefill" or "decode"; start is the host's clock when the
        # first event was recorded. The span runs from an event recorded before
        # the step's launches to one after them, so it holds the GPU given to
        # another context inside the step and any wait of a launch in the
        # library (its pacer, the order). The wall is the call's, to its
        # token on the host: wall - span is what the step waited for
        # besides (the copy back). The issue is the host's time from the
        # first event to the last launch returned: a library's hold shows
        # there, time slicing does not.
        self.busy_s = 0.0
        self.steps = []
        self.setup_s = time.perf_counter() - t

    def _timed(self):
        if self.device.type != "cuda":
            return None
        ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), time.perf_counter())
        ev[0].record()
        return ev

    def _issued(self, ev):
        """Marks the end of the step's launches: the host's time, then the closing event."""
        if ev is None:
            return None
        t = time.perf_counter()
        ev[1].record()
        return t

    def _count(self, ev, kind, issued):
        if ev is not None:  # after the host has waited for the step
            span = ev[0].elapsed_time(ev[1]) / 1e3
            self.busy_s += span
            self.steps.append((kind, span, time.perf_counter() - ev[2], issued - ev[2], ev[2]))

    # ---- the forward pass ------------------------------------------------
    def _rms(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    @staticmethod
    def _rope(x, cos, sin):
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * cos + rot * sin

    def _mlp(self, x, lay):
        g, u = (self._rms(x, lay["ln2"]) @ lay["w13"].t()).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ lay["w2"].t()

    def _split(self, x, lay):
        qkv = self._rms(x, lay["ln1"]) @ lay["wqkv"].t()
        q, k, v = qkv.split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        return (q.unflatten(-1, (self.nh, self.hd)), k.unflatten(-1, (self.nkv, self.hd)),
                v.unflatten(-1, (self.nkv, self.hd)))

    def _logits(self, x):
        return self._rms(x, self.norm) @ self.lm_head.t()

    @torch.inference_mode()
    def _prefill(self, slot, ids):
        """ids [T] -> next token (tensor); fills the slot's cache rows 0..T-1."""
        T = ids.shape[0]
        x = self.embed[ids]  # [T, H]
        cos, sin = self.cos[:T, None, :], self.sin[:T, None, :]
        for i, lay in enumerate(self.layers):
            q, k, v = self._split(x, lay)  # [T, heads, hd]
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.kcache[i][slot, :, :T] = k.transpose(0, 1)
            self.vcache[i][slot, :, :T] = v.transpose(0, 1)
            kk = k.transpose(0, 1).repeat_interleave(self.group, dim=0)
            vv = v.transpose(0, 1).repeat_interleave(self.group, dim=0)
            a = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk[None], vv[None], is_causal=True)
            x = x + a[0].transpose(0, 1).reshape(T, -1) @ lay["wo"].t()
            x = self._mlp(x, lay)
        return self._logits(x[-1]).argmax(-1)

    def _decode_body(self):
        """One token for every slot at its own position; graph-captured (static shapes, no host sync)."""
        B, pos = self.B, self.pos
        x = self.embed[self.tok]  # [B, H]
        cos, sin = self.cos[pos][:, None, :], self.sin[pos][:, None, :]
        # a slot sees its keys up to its own position
        mask = (self.key_ids[None, :] <= pos[:, None])[:, None, None, :]  # [B,1,1,L]
        for i, lay in enumerate(self.layers):
            q, k, v = self._split(x, lay)  # [B, heads, hd]
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            self.kcache[i][self.slot_ids, :, pos] = k
            self.vcache[i][self.slot_ids, :, pos] = v
            # One query per slot: the heads that share a key/value head form its query rows.
            qg = q.view(B, self.nkv, self.group, self.hd)
            a = F.scaled_dot_product_attention(qg, self.kcache[i], self.vcache[i], attn_mask=mask)
            x = x + a.reshape(B, -1) @ lay["wo"].t()
            x = self._mlp(x, lay)
        nxt = self._logits(x).argmax(-1)
        self.out.copy_(nxt)
        self.tok.copy_(nxt)
        # Free slots run on too; kept inside the cache, their output is ignored.
        self.pos.add_(1).clamp_(max=self.L - 1)

    def _capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(s):
            for _ in range(3):
                self._decode_body()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(self.graph):
            self._decode_body()
        torch.cuda.synchronize()
        self.pos.zero_()
        self.tok.zero_()

    # ---- the engine's interface (engine.py) --------------------------------
    def prompt(self, seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.vocab, (self.T,), generator=g).to(self.device, non_blocking=True)

    def prefill(self, slot, prompt_seed):
        ev = self._timed()
        ids = self.prompt(prompt_seed)
        nxt = self._prefill(slot, ids)
        with torch.inference_mode():
            self.tok[slot] = nxt
            self.pos[slot] = ids.shape[0]
        issued = self._issued(ev)
        tok = int(nxt)  # waits for the device: the token is on the host now
        self._count(ev, "prefill", issued)
        return tok

    def decode(self, slots):
        ev = self._timed()
        if self.graph is not None:
            self.graph.replay()
        else:
            with torch.inference_mode():
                self._decode_body()
        issued = self._issued(ev)
        out = self.out.tolist()  # waits for the device
        self._count(ev, "decode", issued)
        return {i: out[i] for i in slots}


class CudaClock:
    """The engine's clock on the host (perf_counter); device work is waited for by the model's calls."""

    def now(self):
        return time.perf_counter()

    def sleep_until(self, t):
        d = t - time.perf_counter()
        if d > 0:
            time.sleep(d)


def selfcheck(device="cuda", graph=True, requests=5, slots=3, prompt_len=16, new_tokens=12):
    """Our serving path (continuous batching, slots reused, CUDA graph) against the library's forward pass.

    A tiny model in float32; each request's greedy tokens must equal the
    argmax of transformers' own logits over its prompt and the tokens before.
    Raises AssertionError naming the first difference."""
    from engine import Engine
    m = Model(shape=TINY, slots=slots, max_len=prompt_len + new_tokens, prompt_len=prompt_len,
              device=device, dtype=torch.float32, graph=graph, seed=1, keep_hf=True)
    eng = Engine(m, CudaClock(), slots=slots, new_tokens=new_tokens, prefills_per_step=1)
    reqs = [eng.submit(0.0, 100 + i) for i in range(requests)]
    while not eng.idle:
        eng.step()
    with torch.inference_mode():
        for r in reqs:
            ids = torch.cat([m.prompt(r.prompt_seed), torch.tensor(r.tokens[:-1], device=m.device)])
            logits = m.hf(ids[None]).logits[0, prompt_len - 1:]
            want = logits.argmax(-1).tolist()
            if want != r.tokens:
                k = next(i for i, (a, b) in enumerate(zip(want, r.tokens)) if a != b)
                raise AssertionError("selfcheck: request %d (slot %d) token %d is %d, transformers says %d"
                                     % (r.id, r.slot, k, r.tokens[k], want[k]))
    return len(reqs)


def graphcheck(device="cuda", slots=4, prompt_len=512, max_len=640, steps=3):
    """The decode step replayed from its CUDA graph against the same step run eagerly, in bf16 at the served
    prompt and cache lengths (the attention kernels that bf16 and these lengths pick, captured).
    Raises AssertionError when their tokens differ."""
    outs = []
    for graph in (True, False):
        m = Model(shape=TINY, slots=slots, max_len=max_len, prompt_len=prompt_len, device=device,
                  dtype=torch.bfloat16, graph=graph, seed=2)
        if graph and m.graph is None:
            raise AssertionError("graphcheck: no CUDA graph was captured")
        toks = [[m.prefill(s, 300 + s) for s in range(slots)]]
        toks += [[m.decode(range(slots))[s] for s in range(slots)] for _ in range(steps)]
        outs.append(toks)
    if outs[0] != outs[1]:
        raise AssertionError("graphcheck: graph replay gave %s, the eager step %s" % (outs[0], outs[1]))
    return steps
