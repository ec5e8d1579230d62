"""Decoder language models written in plain PyTorch, as a user would write them, for the import tests.

:class:`Gpt2` is GPT-2 style (learned positions, LayerNorm, GELU MLP, fused QKV split with ``split``,
causal attention by ``masked_fill`` or by ``scaled_dot_product_attention(is_causal=True)``, tied
embeddings); :class:`Llama` is Llama style (RMSNorm written out with ``pow``/``mean``/``rsqrt``, rotary
embeddings with ``cos``/``sin``/``cat``/``neg`` and slices, grouped-query attention, SwiGLU), optionally
with a mixture of experts routed by ``softmax``/``topk`` with per-expert linears. ``past`` keys and
values (``cat`` with the new token's, then ``select``/slices) make either a KV-cache decode step.
Their :class:`~tests.llm_configs.Config` and the matching ``kind: model`` description
(:func:`~tests.llm_configs.decoder_yaml`) are in :mod:`tests.llm_configs`, which does not import torch.
Only shapes matter: weights stay random and nothing is trained.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional

from tests.llm_configs import Config


class RmsNorm(nn.Module):
    """RMSNorm as Llama writes it: ``x * rsqrt(mean(x^2) + eps) * weight``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[-x2, x1]`` of the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """Causal self-attention with a fused QKV projection, grouped K/V heads and an optional KV cache."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        width = (cfg.heads + 2 * cfg.kv_heads) * cfg.head
        self.qkv = nn.Linear(cfg.hidden, width, bias=not cfg.llama)
        self.o_proj = nn.Linear(cfg.heads * cfg.head, cfg.hidden, bias=not cfg.llama)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, past: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        b, s, _ = x.shape
        sizes = [cfg.heads * cfg.head, cfg.kv_heads * cfg.head, cfg.kv_heads * cfg.head]
        q, k, v = self.qkv(x).split(sizes, dim=-1)
        q = q.view(b, s, cfg.heads, cfg.head).transpose(1, 2)
        k = k.view(b, s, cfg.kv_heads, cfg.head).transpose(1, 2)
        v = v.view(b, s, cfg.kv_heads, cfg.head).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if past is not None:  # past: (2, B, G, P, d); the new token's K and V join the cache
            k = torch.cat((past.select(0, 0), k), dim=2)
            v = torch.cat((past.select(0, 1), v), dim=2)
        cache = torch.stack((k, v))
        group = cfg.heads // cfg.kv_heads
        if cfg.sdpa:  # grouped K/V heads as they are
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=past is None, enable_gqa=group > 1)
        else:
            if group > 1:  # repeat each K/V head for its group of query heads
                k = k[:, :, None].expand(b, cfg.kv_heads, group, k.shape[2], cfg.head).flatten(1, 2)
                v = v[:, :, None].expand(b, cfg.kv_heads, group, v.shape[2], cfg.head).flatten(1, 2)
            scores = q @ k.transpose(-2, -1) / math.sqrt(cfg.head)
            c = k.shape[2]
            mask = torch.ones(s, c, dtype=torch.bool, device=x.device).tril(c - s)
            y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, s, cfg.heads * cfg.head)), cache


class Mlp(nn.Module):
    """GELU MLP (GPT-2) or SwiGLU (Llama)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.llama = cfg.llama
        self.up = nn.Linear(cfg.hidden, cfg.ffn, bias=not cfg.llama)
        self.gate = nn.Linear(cfg.hidden, cfg.ffn, bias=False) if cfg.llama else None
        self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=not cfg.llama)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(functional.silu(self.gate(x)) * self.up(x))
        return self.down(functional.gelu(self.up(x), approximate="tanh"))


class Moe(nn.Module):
    """Token-choice top-k routing to per-expert SwiGLU MLPs with buffers of ``tokens * k / E`` rows.

    Each routed copy goes to a buffer slot by its expert's order of arrival (a sort of the chosen
    experts), as dropless MoE kernels group tokens by expert; the static split assumes balanced
    routing, the shapes the built-in ``moe`` prices when ``tokens * top_k`` is a multiple of ``E``.
    """

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.experts = nn.ModuleList(Mlp(cfg) for _ in range(cfg.experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        flat = x.reshape(b * s, h)
        gates, chosen = self.router(flat).softmax(-1).topk(self.cfg.top_k, dim=-1)
        order = chosen.flatten().argsort()
        rows = order // self.cfg.top_k
        buffers = flat.index_select(0, rows).chunk(self.cfg.experts)
        out = torch.cat([expert(buf) for expert, buf in zip(self.experts, buffers, strict=True)])
        weighted = out * gates.flatten().index_select(0, order)[:, None]
        return torch.zeros_like(flat).index_add(0, rows, weighted).view(b, s, h)


class Block(nn.Module):
    """A pre-norm decoder layer."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.norm1 = RmsNorm(cfg.hidden) if cfg.llama else nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg)
        self.norm2 = RmsNorm(cfg.hidden) if cfg.llama else nn.LayerNorm(cfg.hidden)
        self.mlp = Moe(cfg) if cfg.experts else Mlp(cfg)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, past: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y, cache = self.attn(self.norm1(x), rope, past)
        x = x + y
        return x + self.mlp(self.norm2(x)), cache


class Decoder(nn.Module):
    """GPT-2 style (``cfg.llama`` False) or Llama style decoder; returns the logits (and the KV cache)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = None if cfg.llama else nn.Embedding(cfg.max_position, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RmsNorm(cfg.hidden) if cfg.llama else nn.LayerNorm(cfg.hidden)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False) if cfg.llama else None
        freqs = 1.0 / 10000 ** (torch.arange(0, self.cfg.head, 2).float() / self.cfg.head)
        self.register_buffer("inv_freq", freqs, persistent=False)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos`` and ``sin`` of every position's angles, repeated over both halves of a head."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        both = torch.cat((angles, angles), dim=-1)
        return both.cos(), both.sin()

    def forward(self, ids: torch.Tensor, past: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        start = 0 if past is None else past.shape[-2]
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.wte(ids)
        if self.wpe is not None:
            x = x + self.wpe(positions)
        rope = self.rope(positions) if self.cfg.llama else None
        caches = []
        for i, block in enumerate(self.blocks):
            x, cache = block(x, rope, None if past is None else past[i])
            caches.append(cache)
        x = self.norm(x)
        logits = self.lm_head(x) if self.lm_head is not None else x @ self.wte.weight.t()
        return logits if past is None else (logits, torch.stack(caches))


def past_cache(cfg: Config, batch: int, length: int) -> torch.Tensor:
    """A KV cache of ``length`` tokens: ``(layers, 2, batch, kv_heads, length, head)``."""
    return torch.zeros(cfg.layers, 2, batch, cfg.kv_heads, length, cfg.head)
