"""The masked sparsity controllers' options: Static, DST (SET/RigL) and ADAPT relax/strict, each adding
to the one before. Read without torch (``evogan validate``); the work is in :mod:`evogan_gan.sparse.controller`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from evogan.api import ComponentOptions
from evogan.deprecated import warn
from evogan_gan.sparse.defaults import DEFAULT_CLIP, DEFAULT_EPS, DEFAULT_KEEP_DENSE


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
        description="'fan_in': each unit's initial weights rescaled to its active fan-in, so a masked layer "
        "starts at its dense layer's scale (Evci et al. 2022); 'unscaled': the dense initialisation, masked.",
    )
    br_freq: int = Field(
        0,
        ge=0,
        description="A balance-ratio sample every this many G steps (0: off), taken on the next G step that "
        "faces the cell's own discriminator.",
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
        description="Decay of the generator's sparse moving average (SEMA; 0: off), which evaluation and "
        "pictures then use; a G mask change masks the average too. The paper: 0.999.",
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
        description="Deprecated: a regrown weight's Adam second moment, its layer's mean over active weights "
        "('layer'); 'zero' lost its benchmark (its first steps are up to 16x larger).",
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
        description="Horizon of the cosine drop-fraction schedule in the individual's own steps, about "
        "generations x G steps per generation (the paper: the whole run, 100k).",
    )

    @model_validator(mode="before")
    @classmethod
    def _deprecated_switches(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("grown_moments") == "zero":  # "layer" is what it always does
            warn("sparsity.grown_moments")
        return data

    @model_validator(mode="after")
    def _schedule(self) -> DstOptions:
        if self.drop_fraction_end > self.drop_fraction:
            raise ValueError("drop_fraction_end must not exceed drop_fraction")
        return self


class Calibration(ComponentOptions):
    """The band calibrated on the pair being trained: D's density held at G's for ``warmup`` G steps,
    then [c - h, c + h] around the median BR c of the windows after ``settle``, h = max(width x |c|,
    min_width)."""

    warmup: int = Field(2000, gt=0, description="Warm-up in G steps (at least da_iters, so a window fills).")
    settle: int = Field(
        0, ge=0, description="The warm-up's first G steps left out (BR's rise while the pair first learns)."
    )
    width: float = Field(0.1, gt=0, le=10, description="Half-width relative to the centre (the paper's band: 0.1).")
    min_width: float = Field(0.01, ge=0, description="Smallest half-width in BR units (for a centre near 0).")

    @model_validator(mode="after")
    def _settle(self) -> Calibration:
        if self.settle >= self.warmup:
            raise ValueError(f"settle ({self.settle}) must be below warmup ({self.warmup})")
        return self


# 0.2's flat keys of the calibrated band -> their key in ``calibrate`` (band itself chose it)
FLAT_BAND_KEYS = {"band": "", "band_warmup": "warmup", "band_settle": "settle", "band_width": "width",
                  "band_min_width": "min_width"}  # fmt: skip


class AdaptOptions(DstOptions):
    br_freq: int = Field(
        10,
        gt=0,
        description="A balance-ratio sample every this many G steps, taken on the next G step that faces the "
        "cell's own discriminator.",
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
        description="'dynamic': G prune-and-grow (RigL) every g_interval steps, as the paper; 'static': G keeps "
        "its initial mask and only D's density adapts.",
    )
    decide_after: int = Field(
        0,
        ge=0,
        description="G steps of the cell's generators before D's first density decision (0: as soon as BR's "
        "window is full): with a fixed band, hold D's density while BR still rises as the pair first learns, "
        "which reads as a too strong D at any density.",
    )
    calibrate: Calibration | None = Field(
        None,
        description="A table: calibrate the band on the pair being trained instead of [br_lower, br_upper] "
        "(absent: the paper's fixed band).",
    )
    verify: Literal["off", "shrink", "both"] = Field(
        "off",
        description="Check each density move at the next decision and undo one that did not move BR by the "
        "band's half-width: 'shrink' checks lowerings (the undone density becomes D's floor), 'both' also "
        "raisings (a ceiling); 'off': the paper's rule.",
    )

    verify_after: int = Field(
        1,
        ge=1,
        description="With verify: check a move this many decisions after it, holding D's density in between "
        "(on the MNIST pair BR answers a density change two or three decisions late: benchmarks/RESULTS.md, "
        "issue 41); 1: at the next decision.",
    )
    fallback_after: int = Field(
        3,
        ge=0,
        description="Fall back to static sparsity after this many decisions in a row that could not act on BR "
        "(a move that verify undid, or BR out of its band with D's density at its bound): D keeps its density "
        "and mask, BR sampling stops, and the records say so (adapt_static = 1); 0: never.",
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_band_keys(cls, data: Any) -> Any:
        """0.2's flat keys (``band = "auto"``, ``band_warmup``...) become the ``calibrate`` table, with a warning."""
        if not isinstance(data, dict) or not FLAT_BAND_KEYS & data.keys():
            return data
        data = dict(data)
        old = {key: data.pop(key) for key in FLAT_BAND_KEYS if key in data}
        for key in sorted(old):
            warn(f"sparsity.{key}")
        if old.get("band", "fixed") == "auto" and "calibrate" not in data:
            data["calibrate"] = {new: old[key] for key, new in FLAT_BAND_KEYS.items() if key in old and new}
        elif old.get("band") not in (None, "fixed", "auto"):
            data["calibrate"] = old["band"]  # validation names the bad value
        return data

    @model_validator(mode="after")
    def _band(self) -> AdaptOptions:
        if self.br_lower >= self.br_upper:
            raise ValueError(f"br_lower ({self.br_lower}) must be below br_upper ({self.br_upper})")
        if self.calibrate is not None:
            if self.density_d != self.density_g:
                raise ValueError(
                    f"calibrate measures at d_D = d_G: density_d ({self.density_d}) must equal "
                    f"density_g ({self.density_g})"
                )
            if self.calibrate.warmup < self.da_iters:
                raise ValueError(
                    f"calibrate.warmup ({self.calibrate.warmup}) must be at least da_iters ({self.da_iters}), "
                    "so a window fills during the warm-up"
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


__all__ = ["AdaptOptions", "AdaptStrictOptions", "Calibration", "DstOptions", "StaticOptions"]
