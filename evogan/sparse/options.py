"""The masked sparsity controllers' options: Static, DST (SET/RigL) and ADAPT relax/strict, each adding
to the one before. Read without torch (``evogan validate``); the work is in :mod:`evogan.sparse.controller`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from evogan.api import ComponentOptions
from evogan.sparse.defaults import DEFAULT_CLIP, DEFAULT_EPS, DEFAULT_KEEP_DENSE


class StaticOptions(ComponentOptions):
    density_g: float = Field(
        0.3, gt=0, le=1, description="Overall density (fraction kept) of every generator's masked weights."
    )
    density_d: float = Field(
        0.3, gt=0, le=1, description="Initial overall density of every discriminator's masked weights."
    )
    distribution: Literal["erk", "uniform"] = Field(
        "erk", description="Layer-wise density: Erdos-Renyi-Kernel or uniform."
    )
    keep_dense: tuple[str, ...] = Field(
        DEFAULT_KEEP_DENSE, description="Parameter-name fragments never masked."
    )
    init: Literal["fan_in", "unscaled"] = Field(
        "fan_in",
        description="'fan_in': each unit's initial weights are rescaled to its active fan-in, so a masked "
        "layer starts at its dense layer's activation scale (Evci et al. 2022). Without spectral norm on D "
        "it is what keeps the MNIST MLP pair at 30 % density from collapsing; with it, it measured no "
        "difference. 'unscaled': the dense initialisation, masked (the reference).",
    )
    br_freq: int = Field(
        0,
        ge=0,
        description="A balance-ratio sample falls due every this many G steps of the cell's generators (0 = "
        "off); it is taken on the next G step that faces the cell's own discriminator (on a grid some face "
        "neighbours' copies; due samples wait, at most a window's worth).",
    )
    da_iters: int = Field(
        1000, gt=0, description="BR window in G steps; it holds da_iters // br_freq samples."
    )
    br_eps: float = Field(
        DEFAULT_EPS, gt=0, description="Smallest |r - fD| used as a BR denominator."
    )
    br_clip: float = Field(
        DEFAULT_CLIP, gt=0, description="Per-sample BR ratios are clipped to [-clip, clip]."
    )
    sema: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Decay of the generator's sparse exponential moving average (SEMA; 0 = off). When on, "
        "evaluation and sample pictures use the average; on a G mask change the average is multiplied by "
        "the new mask first (pruned positions 0, grown ones start at 0). The paper: 0.999 over 100k steps.",
    )

    @model_validator(mode="after")
    def _window(self) -> StaticOptions:
        if self.br_freq and self.da_iters < self.br_freq:
            raise ValueError(f"da_iters ({self.da_iters}) must be at least br_freq ({self.br_freq})")
        return self


class DstOptions(StaticOptions):
    g_interval: int = Field(500, gt=0, description="Generator prune-and-grow every this many G steps.")
    grown_moments: Literal["layer", "zero"] = Field(
        "layer",
        description="A regrown weight's Adam second moment: 'layer', the mean of its layer's active weights, "
        "so its first steps are its neighbours' size; 'zero': zero, whence (bias correction being per "
        "tensor) its first step is (1 - beta1) / sqrt(1 - beta2) learning rates, 16 at betas (0.5, 0.999).",
    )
    drop_fraction: float = Field(
        0.5, gt=0, le=1, description="Fraction of active G weights replaced at step 0."
    )
    drop_fraction_end: float = Field(
        0.005, ge=0, le=1, description="Drop fraction reached at total_steps (cosine)."
    )
    total_steps: int = Field(
        10_000,
        gt=0,
        description="Horizon of the cosine drop-fraction schedule in the individual's own steps (the paper: "
        "the whole run, 100k); set it to about generations x G steps per generation (batches / critic_steps). "
        "Constant after it.",
    )

    @model_validator(mode="after")
    def _schedule(self) -> DstOptions:
        if self.drop_fraction_end > self.drop_fraction:
            raise ValueError("drop_fraction_end must not exceed drop_fraction")
        return self


class AdaptOptions(DstOptions):
    br_freq: int = Field(
        10,
        gt=0,
        description="A balance-ratio sample falls due every this many G steps of the cell's generators; it "
        "is taken on the next G step that faces the cell's own discriminator.",
    )
    br_lower: float = Field(0.45, description="BR at or below this: D too strong, lower its density.")
    br_upper: float = Field(0.55, description="BR at or above this: D too weak, raise its density.")
    density_step: float = Field(0.05, gt=0, le=1, description="Change of D density per decision.")
    density_min: float = Field(0.05, gt=0, le=1, description="D density never goes below this.")
    density_max: float = Field(1.0, gt=0, le=1, description="D density never goes above this.")
    d_interval: int = Field(
        1000,
        gt=0,
        description="A D density decision every this many G steps of the cell's generators (window full), "
        "taken on D's next step.",
    )
    d_growth: Literal["gradient", "random"] = Field("gradient", description="How D grows new weights.")
    g_mask: Literal["dynamic", "static"] = Field(
        "dynamic",
        description="'dynamic': G prune-and-grow (RigL) every g_interval steps, as the paper. 'static': G "
        "keeps its initial mask and only D's density adapts (at short horizons G's DST costs more FID than "
        "the D controller gains: benchmarks/RESULTS.md, 'Sparse training').",
    )
    band: Literal["fixed", "auto"] = Field(
        "fixed",
        description="'fixed': keep BR inside [br_lower, br_upper] (the paper's band, tuned on SNGAN hinge "
        "logits). 'auto': calibrate the band on this network pair: for the first band_warmup G steps D's "
        "density stays at density_g (= density_d, static balance) and every full window's BR after "
        "band_settle steps is recorded; "
        "then the band is [c - h, c + h] with c their median and h = max(band_width x |c|, "
        "band_min_width), and decisions start (the first on the first d_interval multiple after the "
        "warm-up).",
    )
    band_warmup: int = Field(
        2000,
        gt=0,
        description="band = 'auto': warm-up length in G steps of the balance clock (at least da_iters, so "
        "one window fills).",
    )
    band_settle: int = Field(
        0,
        ge=0,
        description="band = 'auto': the first this many G steps of the warm-up are not used for the "
        "calibration (BR rises from near 0 while the pair first learns; a band centred on that transient "
        "only ever grows D). Must be below band_warmup.",
    )
    band_width: float = Field(
        0.1,
        gt=0,
        le=10,
        description="band = 'auto': half-width relative to the centre (0.1: the paper's [0.45, 0.55] is 0.5 +/- 10 %).",
    )
    band_min_width: float = Field(
        0.01, ge=0, description="band = 'auto': smallest half-width in BR units (for a centre near 0)."
    )
    verify: Literal["off", "shrink", "both"] = Field(
        "off",
        description="Check each density move at the next decision: lowering D's density should raise BR "
        "(G closes more of the gap), raising it should lower BR. 'shrink': a lowering after which the "
        "window's BR rose by less than the band's half-width (window noise) is undone, and the density "
        "before it becomes D's floor for the rest of the run (BR's level drifts with training on some pairs, "
        "and a band then starves D; a move that does not act on BR only costs quality). 'both': likewise a "
        "raising after which BR fell by less than the half-width is undone and sets a ceiling. 'off': the "
        "paper's rule. Exact when da_iters <= d_interval (the window after a move holds no sample from "
        "before it).",
    )

    @model_validator(mode="after")
    def _band(self) -> AdaptOptions:
        if self.br_lower >= self.br_upper:
            raise ValueError(f"br_lower ({self.br_lower}) must be below br_upper ({self.br_upper})")
        if self.band == "auto":
            if self.density_d != self.density_g:
                raise ValueError(
                    f'band = "auto" calibrates at d_D = d_G: density_d ({self.density_d}) must equal '
                    f"density_g ({self.density_g})"
                )
            if self.band_warmup < self.da_iters:
                raise ValueError(
                    f"band_warmup ({self.band_warmup}) must be at least da_iters ({self.da_iters}), so a "
                    "window fills during the warm-up"
                )
            if self.band_settle >= self.band_warmup:
                raise ValueError(
                    f"band_settle ({self.band_settle}) must be below band_warmup ({self.band_warmup})"
                )
        if not self.density_min <= self.density_d <= self.density_max:
            raise ValueError(
                f"density_d ({self.density_d}) must lie within [density_min, density_max] "
                f"= [{self.density_min}, {self.density_max}]"
            )
        return self


class AdaptStrictOptions(AdaptOptions):
    density_max: float = Field(
        0.5, gt=0, le=1, description="D density cap; at the cap a weak D gets a DST step."
    )
    d_interval: int = Field(
        2000,
        gt=0,
        description="A D density decision every this many G steps of the cell's generators (window full), "
        "taken on D's next step.",
    )
    d_drop_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="D DST drop fraction at the start; cosine to drop_fraction_end over total_steps G steps "
        "(G steps seen by D, so n_critic and d_skip do not change the horizon).",
    )


__all__ = ["AdaptOptions", "AdaptStrictOptions", "DstOptions", "StaticOptions"]
